package streamcheck

import (
	"encoding/binary"
	"errors"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// apply runs op against the system and the model. It reports whether op was applied (false:
// its objects are gone or its preconditions do not hold; nothing was done), and what it found
// wrong.
func (w *world) apply(op Op) (bool, *Failure) {
	if op.S >= len(w.streams) {
		return false, nil
	}
	s := w.streams[op.S]
	switch op.Kind {
	case DevAlloc:
		return w.devAlloc(op, s)
	case DevWrite, DevRead, DevMemset:
		return w.devCopy(op, s)
	case DevFreeAsync, DevFree, DevDoubleFree, DevOutOfBounds:
		return w.devFree(op, s)
	case PoolAlloc:
		return w.poolAlloc(op)
	case PoolStamp, PoolFree, PoolFreeAsync, PoolRecordFree, PoolRawCopy, PoolDoubleFree, PoolSubFree:
		return w.poolOp(op, s)
	case PoolRawFree:
		return w.poolRawFree(op, s)
	case DevReuseFree:
		return w.reuseFree(op, s)
	case TierAlloc, TierAcquire, TierRelease, TierWrongRelease, TierHost, TierEvict, TierPrefetch, TierFree, TierDoubleFree:
		return w.tierOp(op, s)
	default:
		return w.misc(op, s)
	}
}

func (w *world) devAlloc(op Op, s pubcuda.Stream) (bool, *Failure) {
	if len(w.dev) >= maxDevBlocks || op.N <= 0 {
		return false, nil
	}
	p, err := w.heap.Alloc(int(op.N), s)
	q := int(w.cfg.DeviceQuota)
	tierBound := 3 * int(w.cfg.TierBudget) // the tier's VRAM (blocks and spare) counts against the quota too
	switch {
	case err == nil:
		if q > 0 && w.devLive+op.N > q {
			_ = w.heap.Free(p)
			return true, failf("device quota not enforced", "Alloc(%d) with %d of %d live succeeded", op.N, w.devLive, q)
		}
	case errors.Is(err, device.ErrQuota):
		pending := 0
		if w.hold {
			pending = w.pendingFreed(w.devFreed)
		}
		if w.devLive+op.N+tierBound+pending <= q {
			return true, failf("device quota refused with room", "%v (model: %d live, %d of frees maybe pending, tier at most %d, quota %d)", err, w.devLive, pending, tierBound, q)
		}
		w.counts["device quota refusals"]++
		return true, nil
	case errors.Is(err, device.ErrOutOfMemory):
		if w.devLive == 0 && w.tierPinned == 0 && !w.hold && uintptr(op.N) <= w.cfg.DeviceCapacity/2 && !w.tierHostFull() {
			return true, failf("device out of memory with nothing held", "%v", err)
		}
		w.counts["device out of memory"]++
		return true, nil
	default:
		return true, unexpected("device.Heap.Alloc", err)
	}
	d := &dblock{p: p, n: op.N, alloc: op.S, busy: -1, want: make([]byte, op.N)}
	if !(op.Flag && w.cfg.DeviceZero) {
		if err := w.heap.MemsetAsync(p, byte(op.V), int(op.N), s); err != nil {
			return true, unexpected("device.Heap.MemsetAsync", err)
		}
		fill(d.want, byte(op.V))
		d.busy, d.busyAt = op.S, w.queue(op.S).at
	} else {
		d.busy, d.busyAt = op.S, w.tick() // a fresh block of the stream: a later synchronize of it passes it
	}
	w.dev[op.ID] = d
	w.devID = insertID(w.devID, op.ID)
	w.devLive += op.N
	return true, nil
}

// tierHostFull reports whether the tier's host pool, when it has a quota of its own
// (TierHostQuota), may be too full to take the largest block: the tier then cannot evict its
// dirty blocks, and their VRAM may fill the device heap with no user block live.
func (w *world) tierHostFull() bool {
	if w.tierPool == nil {
		return false
	}
	return w.tierPool.Stats().InUse+uint64(tierSizes[len(tierSizes)-1]) > uint64(w.cfg.TierHostQuota)
}

// fill sets every byte of b to v, doubling copies (a byte loop is slow under -race).
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// stamp fills b with a pattern of seed that no other seed shares at any index. The pattern
// repeats every 256 bytes, so the first 256 are computed and doubled by copies (a byte loop over
// every buffer was a quarter of TestStreamOrder's time).
func stamp(b []byte, seed uint32) {
	pattern.Fill(b, stampPeriod, func(i int) byte { return byte(seed>>(uint(i)%4*8)) ^ byte(i*29) })
}

// stampPeriod is the period of stamp's pattern: that of byte(i*29), a multiple of 4.
const stampPeriod = 256

func (w *world) devCopy(op Op, s pubcuda.Stream) (bool, *Failure) {
	d := w.dev[op.A]
	if d == nil || !w.usable(d.busy, op.S) || op.Off < 0 || op.Off >= d.n {
		return false, nil
	}
	n := min(op.N, d.n-op.Off)
	var bf *pbuf
	if op.Kind != DevMemset && op.B >= 0 {
		if bf = w.bufs[op.B]; bf == nil || !w.usable(bf.busy, op.S) {
			return false, nil
		}
		n = min(n, len(bf.b))
	}
	if n <= 0 {
		return false, nil
	}
	at := d.p + pubcuda.DevicePtr(op.Off)
	q := w.queue(op.S).at // the copy's one mark, the block's and the pool buffer's
	switch op.Kind {
	case DevMemset:
		if err := w.heap.MemsetAsync(at, byte(op.V), int(n), s); err != nil {
			return true, unexpected("device.Heap.MemsetAsync", err)
		}
		fill(d.want[op.Off:op.Off+n], byte(op.V))
	case DevWrite:
		src := make([]byte, n)
		if bf != nil {
			copy(src, bf.want)
			if err := w.heap.HtoDAsync(at, bf.b[:n], s); err != nil {
				return true, unexpected("device.Heap.HtoDAsync (pool buffer)", err)
			}
			bf.busy, bf.busyAt = op.S, q
		} else {
			stamp(src, op.V)
			if err := w.heap.HtoDAsync(at, src, s); err != nil {
				return true, unexpected("device.Heap.HtoDAsync (Go memory)", err)
			}
		}
		copy(d.want[op.Off:], src)
	case DevRead:
		if bf != nil {
			if err := w.heap.DtoHAsync(bf.b[:n], at, s); err != nil {
				return true, unexpected("device.Heap.DtoHAsync (pool buffer)", err)
			}
			copy(bf.want, d.want[op.Off:op.Off+n])
			bf.busy, bf.busyAt = op.S, q
		} else {
			dst := make([]byte, n)
			if err := w.heap.DtoHAsync(dst, at, s); err != nil {
				return true, unexpected("device.Heap.DtoHAsync (Go memory)", err)
			}
			if f := compare("device block bytes (pageable read)", op.A, dst, d.want[op.Off:op.Off+n], op.Off); f != nil {
				return true, f
			}
		}
	}
	d.busy, d.busyAt = op.S, q
	return true, nil
}

func (w *world) devFree(op Op, s pubcuda.Stream) (bool, *Failure) {
	d := w.dev[op.A]
	if d == nil {
		return false, nil
	}
	switch op.Kind {
	case DevOutOfBounds:
		off := min(max(op.Off, 0), d.n-1)
		err := w.heap.HtoDAsync(d.p+pubcuda.DevicePtr(off), make([]byte, d.n-off+1), s)
		return true, wantErr("device.Heap.HtoDAsync past a block's end", err, device.ErrOutOfBounds)
	case DevFree:
		if d.busy >= 0 {
			return false, nil
		}
		if err := w.heap.Free(d.p); err != nil {
			return true, unexpected("device.Heap.Free", err)
		}
	default: // DevFreeAsync, DevDoubleFree
		if !w.usable(d.busy, op.S) {
			return false, nil
		}
		if err := w.heap.FreeAsync(d.p, s); err != nil {
			return true, unexpected("device.Heap.FreeAsync", err)
		}
		if op.Kind == DevDoubleFree {
			if f := wantErr("device.Heap.DtoHAsync from a freed block", w.heap.DtoHAsync(make([]byte, 1), d.p, s), device.ErrNotOwned); f != nil {
				return true, f
			}
			if f := wantErr("device.Heap.FreeAsync twice", w.heap.FreeAsync(d.p, s), heap.ErrDoubleFree); f != nil {
				return true, f
			}
		}
		w.devFreed = append(w.devFreed, freed{n: d.n, marks: [2]mark{{op.S, w.tick()}, {d.busy, d.busyAt}}})
		if op.S != d.alloc {
			w.crossFrees[d.alloc]++
		}
	}
	delete(w.dev, op.A)
	w.devID = removeID(w.devID, op.A)
	w.devLive -= d.n
	return true, nil
}

func (w *world) poolAlloc(op Op) (bool, *Failure) {
	if len(w.bufs) >= maxPoolBufs || op.N <= 0 || w.poolLive+w.pendingFreed(w.poolFreed)+op.N > maxPoolLive {
		return false, nil
	}
	b, err := w.pool.Alloc(op.N)
	q := int(w.cfg.PoolQuota)
	switch {
	case err == nil:
		if q > 0 && w.poolLive+op.N > q {
			_ = w.pool.Free(b)
			return true, failf("pool quota not enforced", "Alloc(%d) with %d of %d live succeeded", op.N, w.poolLive, q)
		}
	case errors.Is(err, pinned.ErrQuota):
		pending := 0
		if w.hold {
			// The pool marks a stream's point lazily, with an event recorded when it reclaims,
			// after whatever work was queued since the free ("it only makes reuse later"):
			// while Hold keeps that work pending, buffers whose streams the model saw pass may
			// still wait. The pool's own count of them is the bound then.
			pending = max(w.pendingFreed(w.poolFreed), int(w.pool.Stats().DeferredBytes))
		}
		if w.poolLive+op.N+pending <= q {
			return true, failf("pool quota refused with room", "%v (model: %d live, %d of frees maybe pending on held streams, quota %d)", err, w.poolLive, pending, q)
		}
		w.counts["pool quota refusals"]++
		return true, nil
	default:
		return true, unexpected("pinned.Pool.Alloc", err)
	}
	if w.cfg.PoolZero {
		if i := nonZero(b); i >= 0 {
			return true, failf("pool buffer not clear at Alloc", "buffer #%d of %d bytes holds %#x at %d (ZeroOnFree: every freed buffer is scrubbed once its streams passed it)", op.ID, len(b), b[i], i)
		}
	}
	bf := &pbuf{b: b, want: make([]byte, op.N), busy: -1}
	stamp(bf.want, op.V)
	copy(b, bf.want)
	w.bufs[op.ID] = bf
	w.bufID = insertID(w.bufID, op.ID)
	w.poolLive += op.N
	return true, nil
}

func nonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 { // a word at a time: most buffers checked are long
		if binary.NativeEndian.Uint64(b[i:]) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

func (w *world) poolOp(op Op, s pubcuda.Stream) (bool, *Failure) {
	bf := w.bufs[op.A]
	if bf == nil {
		return false, nil
	}
	marks := [2]mark{noMark, {bf.busy, bf.busyAt}}
	switch op.Kind {
	case PoolStamp:
		if bf.busy >= 0 {
			return false, nil
		}
		stamp(bf.want, op.V)
		copy(bf.b, bf.want)
		return true, nil
	case PoolRawCopy:
		d := w.dev[op.B]
		if d == nil || !w.usable(bf.busy, op.S) || !w.usable(d.busy, op.S) {
			return false, nil
		}
		n := min(len(bf.b), d.n, max(op.N, 1))
		if err := w.rig.Dev.MemcpyHtoDAsync(uintptr(d.p), mem.Addr(bf.b), uintptr(n), uintptr(s)); err != nil {
			return true, unexpected("raw cuMemcpyHtoDAsync", err)
		}
		if err := w.pool.RecordStream(bf.b, s); err != nil {
			return true, unexpected("pinned.Pool.RecordStream", err)
		}
		copy(d.want, bf.want[:n])
		at := w.queue(op.S).at
		d.busy, d.busyAt, bf.busy, bf.busyAt = op.S, at, op.S, at
		return true, nil
	case PoolSubFree:
		if len(bf.b) < 2 {
			return false, nil
		}
		if f := wantErr("pinned.Pool.Free of a buffer with its capacity cut", w.pool.Free(bf.b[:len(bf.b)-1:len(bf.b)-1]), pinned.ErrSubSlice); f != nil {
			return true, f
		}
		return true, wantErr("pinned.Pool.Free of an offset buffer", w.pool.Free(bf.b[1:]), pinned.ErrSubSlice)
	case PoolFree, PoolDoubleFree:
		if err := w.pool.Free(bf.b); err != nil {
			return true, unexpected("pinned.Pool.Free", err)
		}
		if op.Kind == PoolDoubleFree {
			if f := wantErr("pinned.Pool.Free twice", w.pool.Free(bf.b), pinned.ErrDoubleFree); f != nil {
				return true, f
			}
		}
	case PoolFreeAsync:
		if err := w.pool.FreeAsync(bf.b, s); err != nil {
			return true, unexpected("pinned.Pool.FreeAsync", err)
		}
		marks[0] = mark{op.S, w.tick()}
	case PoolRecordFree:
		lo := min(max(op.Off, 0), len(bf.b)-1)
		hi := min(lo+max(op.N, 1), len(bf.b))
		if err := w.pool.RecordStream(bf.b[lo:hi], s); err != nil {
			return true, unexpected("pinned.Pool.RecordStream", err)
		}
		if err := w.pool.Free(bf.b); err != nil {
			return true, unexpected("pinned.Pool.Free", err)
		}
		marks[0] = mark{op.S, w.tick()}
	}
	if marks[0].slot >= 0 || marks[1].slot >= 0 {
		w.poolFreed = append(w.poolFreed, freed{n: len(bf.b), marks: marks})
	}
	delete(w.bufs, op.A)
	w.bufID = removeID(w.bufID, op.A)
	w.poolLive -= len(bf.b)
	return true, nil
}

// poolRawFree is a copy the pool does not see (the raw driver, no RecordStream) between a pool
// buffer and a device block on S, then FreeAsync of the buffer on T, a stream whose later work
// runs after S's: S itself, or, in the legacy mix, a blocking stream after the legacy stream or
// the reverse. The free is ordered after the copy by T's order alone, as cudaFreeAsync's is.
func (w *world) poolRawFree(op Op, s pubcuda.Stream) (bool, *Failure) {
	bf, d := w.bufs[op.A], w.dev[op.B]
	if bf == nil || d == nil || op.T < 0 || op.T >= len(w.streams) || !w.ordered(op.S, op.T) ||
		!w.usable(bf.busy, op.S) || !w.usable(d.busy, op.S) {
		return false, nil
	}
	n := min(len(bf.b), d.n, max(op.N, 1))
	if op.Flag {
		if err := w.rig.Dev.MemcpyDtoHAsync(mem.Addr(bf.b), uintptr(d.p), uintptr(n), uintptr(s)); err != nil {
			return true, unexpected("raw cuMemcpyDtoHAsync", err)
		}
	} else {
		if err := w.rig.Dev.MemcpyHtoDAsync(uintptr(d.p), mem.Addr(bf.b), uintptr(n), uintptr(s)); err != nil {
			return true, unexpected("raw cuMemcpyHtoDAsync", err)
		}
		copy(d.want, bf.want[:n])
	}
	at := w.queue(op.S).at
	d.busy, d.busyAt = op.S, at
	if err := w.pool.FreeAsync(bf.b, w.streams[op.T]); err != nil {
		return true, unexpected("pinned.Pool.FreeAsync", err)
	}
	w.poolFreed = append(w.poolFreed, freed{n: len(bf.b), marks: [2]mark{{op.T, w.tick()}, {op.S, at}}})
	delete(w.bufs, op.A)
	w.bufID = removeID(w.bufID, op.A)
	w.poolLive -= len(bf.b)
	return true, nil
}

func (w *world) misc(op Op, s pubcuda.Stream) (bool, *Failure) {
	switch op.Kind {
	case Sync:
		if err := w.rig.Dev.StreamSynchronize(uintptr(s)); err != nil {
			return true, unexpected("cuStreamSynchronize", err)
		}
		w.synced(op.S)
		return true, w.check()
	case Hold:
		w.rig.F.Hold(op.Flag)
		w.hold = op.Flag
	case Complete:
		w.rig.F.Complete()
		w.completed()
		return true, w.check()
	case CompleteStream:
		w.rig.F.CompleteStream(uintptr(s))
		w.synced(op.S)
	case HeapTrim:
		if err := w.heap.Trim(); err != nil {
			return true, unexpected("device.Heap.Trim", err)
		}
		clear(w.crossFrees) // both wait for every deferred free
	case HeapSync:
		if err := w.heap.Sync(); err != nil {
			return true, unexpected("device.Heap.Sync", err)
		}
		clear(w.crossFrees)
	case PoolTrim:
		if err := w.pool.Trim(); err != nil {
			return true, unexpected("pinned.Pool.Trim", err)
		}
	case ArenaTrim:
		// The purge, at once: what the heaps gave the arena must be free of every stream's
		// work already, so decommitting it any time is safe.
		w.heap.Arena().Trim()
	case TierSync:
		if err := w.tier.Sync(); err != nil {
			return true, unexpected("uvm.Tier.Sync", err)
		}
	case Stats:
		_ = w.heap.Stats()
		ts := w.tier.Stats()
		if ts.Blocks != len(w.tb) {
			return true, failf("tier stats", "%d blocks, the model has %d", ts.Blocks, len(w.tb))
		}
		ps := w.pool.Stats()
		if live := ps.Live - ps.Deferred; live != uint64(len(w.bufs)) || ps.InUse-ps.DeferredBytes != uint64(w.poolLive) {
			return true, failf("pool stats", "%d live buffers (%d bytes) less %d deferred (%d bytes); the model has %d (%d bytes)",
				ps.Live, ps.InUse, ps.Deferred, ps.DeferredBytes, len(w.bufs), w.poolLive)
		}
	case Recreate:
		return w.recreate(op, s)
	default:
		return false, nil
	}
	return true, nil
}
