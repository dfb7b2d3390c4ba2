package streamcheck

import (
	"fmt"
	"strings"
)

// Kind is what an operation does.
type Kind uint8

// The operations. Objects are named by the index of the operation that made them (Op.ID), so
// that a subset of a sequence replays with the same names; an operation whose objects do not
// exist, or whose preconditions (the contract in the package documentation) do not hold when
// it is replayed, is skipped.
const (
	DevAlloc         Kind = iota // heap.Alloc(N, S), then a memset to V on S (or none: Flag, ZeroOnFree)
	DevWrite                     // HtoDAsync of pool buffer B (or Go memory: B < 0) to block A at Off, N bytes, on S
	DevRead                      // DtoHAsync of N bytes of block A at Off into pool buffer B (or Go memory, checked at once), on S
	DevMemset                    // MemsetAsync of N bytes of block A at Off to V, on S
	DevFreeAsync                 // FreeAsync(A, S)
	DevFree                      // Free(A)
	DevDoubleFree                // FreeAsync(A, S), then a copy from A (ErrNotOwned) and FreeAsync again (ErrDoubleFree)
	DevOutOfBounds               // HtoDAsync of one byte more than block A holds from Off: ErrOutOfBounds
	PoolAlloc                    // pool.Alloc(N), stamped with V
	PoolStamp                    // the CPU writes stamp V over buffer A
	PoolFree                     // pool.Free(A)
	PoolFreeAsync                // pool.FreeAsync(A, S)
	PoolRecordFree               // RecordStream(A[Off:Off+N], S), then Free(A)
	PoolRawCopy                  // a raw driver HtoDAsync of buffer A to block B on S, then RecordStream(A, S)
	PoolDoubleFree               // Free(A) twice: ErrDoubleFree
	PoolSubFree                  // Free(A[:len-1:len-1]) and Free(A[1:]): ErrSubSlice, A stays live
	TierAlloc                    // tier.Alloc(N)
	TierAcquire                  // Acquire(A, S, Write if Flag): a write memsets to V and copies pool buffer B (if any) over the start; a read is checked
	TierRelease                  // Release(A, its stream)
	TierWrongRelease             // Release(A, S) on a stream it is not acquired on: ErrWrongStream
	TierHost                     // AcquireHost(A, Write if Flag): checked, a write stamps V; then ReleaseHost
	TierEvict                    // Evict of the unacquired blocks among A, B, Off
	TierPrefetch                 // Prefetch of the unacquired blocks among A, B, Off on S
	TierFree                     // tier.Free(A)
	TierDoubleFree               // tier.Free(A) twice: ErrInvalidHandle
	Sync                         // StreamSynchronize(S), then check every idle object
	Hold                         // the fake's Hold(Flag)
	Complete                     // the fake runs all pending work; check every object
	CompleteStream               // the fake runs S's pending work
	HeapTrim                     // device.Heap.Trim
	HeapSync                     // device.Heap.Sync
	PoolTrim                     // pinned.Pool.Trim
	Stats                        // Stats of heap, pool and tier
	TierSync                     // uvm.Tier.Sync
	Recreate                     // synchronize S, ForgetStream it everywhere, destroy it, make a new one
	PoolRawFree                  // a raw driver copy between buffer A and block B on S (HtoD, or DtoH with Flag), no RecordStream, then FreeAsync(A, T), T ordered after S
	ArenaTrim                    // the device heap's arena gives back every memory no span wants at once (arena.Arena.Trim): the purge, now
	DevReuseFree                 // block A copied into pool buffer B and freed on S, its block taken again on S and freed on T (Free: Flag); T run, then S; B checked (reuse.go)
	numKinds
)

var kindNames = [numKinds]string{
	"DevAlloc", "DevWrite", "DevRead", "DevMemset", "DevFreeAsync", "DevFree", "DevDoubleFree", "DevOutOfBounds",
	"PoolAlloc", "PoolStamp", "PoolFree", "PoolFreeAsync", "PoolRecordFree", "PoolRawCopy", "PoolDoubleFree", "PoolSubFree",
	"TierAlloc", "TierAcquire", "TierRelease", "TierWrongRelease", "TierHost", "TierEvict", "TierPrefetch", "TierFree", "TierDoubleFree",
	"Sync", "Hold", "Complete", "CompleteStream", "HeapTrim", "HeapSync", "PoolTrim", "Stats", "TierSync", "Recreate",
	"PoolRawFree", "ArenaTrim", "DevReuseFree",
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	if k == numKinds {
		return "Finish (the final checks)"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Op is one operation of a sequence. Which fields matter depends on Kind.
type Op struct {
	ID   int // the operation's index in the generated sequence: the name of what it makes
	Kind Kind
	S    int // stream slot
	T    int // a second stream slot (PoolRawFree: the free's)
	A, B int // objects (IDs of the operations that made them); -1 for none
	N    int // size or length
	Off  int
	V    uint32 // fill byte or stamp
	Flag bool
}

func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", o.ID, o.Kind)
	obj := func(id int) string {
		if id < 0 {
			return "go"
		}
		return fmt.Sprintf("#%d", id)
	}
	switch o.Kind {
	case DevAlloc:
		fmt.Fprintf(&b, " s%d n=%d fill=%#x zero=%v", o.S, o.N, byte(o.V), o.Flag)
	case DevWrite:
		fmt.Fprintf(&b, " s%d dst=%s+%d src=%s n=%d", o.S, obj(o.A), o.Off, obj(o.B), o.N)
	case DevRead:
		fmt.Fprintf(&b, " s%d src=%s+%d dst=%s n=%d", o.S, obj(o.A), o.Off, obj(o.B), o.N)
	case DevMemset:
		fmt.Fprintf(&b, " s%d %s+%d n=%d v=%#x", o.S, obj(o.A), o.Off, o.N, byte(o.V))
	case DevFreeAsync, DevDoubleFree, PoolFreeAsync, TierWrongRelease:
		fmt.Fprintf(&b, " %s s%d", obj(o.A), o.S)
	case DevFree, DevOutOfBounds, PoolFree, PoolDoubleFree, PoolSubFree, TierRelease, TierFree, TierDoubleFree:
		fmt.Fprintf(&b, " %s", obj(o.A))
	case PoolAlloc, TierAlloc:
		fmt.Fprintf(&b, " n=%d stamp=%d", o.N, o.V)
	case PoolStamp:
		fmt.Fprintf(&b, " %s stamp=%d", obj(o.A), o.V)
	case PoolRecordFree:
		fmt.Fprintf(&b, " %s[%d:%d] s%d", obj(o.A), o.Off, o.Off+o.N, o.S)
	case PoolRawCopy:
		fmt.Fprintf(&b, " s%d src=%s dst=%s n=%d", o.S, obj(o.A), obj(o.B), o.N)
	case PoolRawFree:
		dir := "HtoD"
		if o.Flag {
			dir = "DtoH"
		}
		fmt.Fprintf(&b, " s%d %s buf=%s block=%s n=%d, free on s%d", o.S, dir, obj(o.A), obj(o.B), o.N, o.T)
	case DevReuseFree:
		free := fmt.Sprintf("FreeAsync on s%d", o.T)
		if o.Flag {
			free = "Free"
		}
		fmt.Fprintf(&b, " s%d block=%s buf=%s, reused and freed by %s", o.S, obj(o.A), obj(o.B), free)
	case TierAcquire:
		mode := "read"
		if o.Flag {
			mode = "write"
		}
		fmt.Fprintf(&b, " %s s%d %s fill=%#x src=%s", obj(o.A), o.S, mode, byte(o.V), obj(o.B))
	case TierHost:
		fmt.Fprintf(&b, " %s write=%v stamp=%d", obj(o.A), o.Flag, o.V)
	case TierEvict, TierPrefetch:
		fmt.Fprintf(&b, " s%d %s %s %s", o.S, obj(o.A), obj(o.B), obj(o.Off))
	case Hold:
		fmt.Fprintf(&b, " %v", o.Flag)
	case Sync, CompleteStream, Recreate:
		fmt.Fprintf(&b, " s%d", o.S)
	}
	return b.String()
}
