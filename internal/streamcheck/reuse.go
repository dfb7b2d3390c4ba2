package streamcheck

import (
	"math/rand/v2"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

// A block handed over on its stream with its old owner's work still queued (DevReuseFree).
//
// A block freed on its own stream s goes to the next Alloc on s at once (device.Heap.FreeAsync's
// same-stream rule), while the old owner's work queued on s before the free has not run. The
// new owner knows nothing of that work, and with ZeroOnFree a free of the block queues a memset:
// a Free's on the legacy stream, a FreeAsync's on the freeing stream t. The heap must order that
// memset after s, or it overtakes the old owner's work (its copy out of the block reads zeros).
// The generator's own draws seldom line these up (a copy out, the free on s, an Alloc of the
// same class on s with no memset, a free elsewhere, t run before s), so a hand-over does it in
// one operation, and checks the old owner's copy at once.

// reuseFreeEvery is how often (one in) the generator puts a hand-over in place of the
// operation it drew, with a ZeroOnFree heap.
const reuseFreeEvery = 64

// genReuseFree draws a hand-over: a block below heap.HugeThreshold (one a same-stream free
// hands out at once), its stream when it is busy, a pool buffer usable there, another stream
// to free it on.
func (w *world) genReuseFree(r *rand.Rand, id int) Op {
	op := Op{ID: id, Kind: DevReuseFree, S: r.IntN(len(w.streams)), A: -1, B: -1, Flag: r.IntN(4) == 0}
	var small []int
	for _, a := range w.devID {
		if w.dev[a].n <= heap.HugeThreshold {
			small = append(small, a)
		}
	}
	if len(small) > 0 {
		op.A = small[r.IntN(len(small))]
		if d := w.dev[op.A]; d.busy >= 0 {
			op.S = d.busy
		}
	}
	var bufs []int
	for _, b := range w.bufID {
		if w.usable(w.bufs[b].busy, op.S) {
			bufs = append(bufs, b)
		}
	}
	if len(bufs) > 0 {
		op.B = bufs[r.IntN(len(bufs))]
	}
	op.T = (op.S + 1 + r.IntN(len(w.streams)-1)) % len(w.streams)
	return op
}

// reuseFree is a hand-over: block A, its old owner's, is copied into pool buffer B on S (held
// by the fake's late execution) and freed on S; an Alloc of its size on S with no memset takes
// it again at once (or any block: the model does not ask which); the new owner, who queued
// nothing, frees it at once, with FreeAsync on T, which the fake then runs (CompleteStream), or
// with Free (Flag). Then S runs (a synchronize) and B must hold A's bytes.
func (w *world) reuseFree(op Op, s pubcuda.Stream) (bool, *Failure) {
	d, bf := w.dev[op.A], w.bufs[op.B]
	if !w.cfg.DeviceZero || d == nil || bf == nil || op.T < 0 || op.T >= len(w.streams) ||
		op.T == op.S || !w.usable(d.busy, op.S) || !w.usable(bf.busy, op.S) {
		return false, nil
	}
	n := min(d.n, len(bf.b))
	if _, f := w.devCopy(Op{ID: op.ID, Kind: DevRead, S: op.S, A: op.A, B: op.B, N: n}, s); f != nil {
		return true, f
	}
	if _, f := w.devFree(Op{ID: op.ID, Kind: DevFreeAsync, S: op.S, A: op.A}, s); f != nil {
		return true, f
	}
	if _, f := w.devAlloc(Op{ID: op.ID, Kind: DevAlloc, S: op.S, N: d.n, Flag: true}, s); f != nil {
		return true, f
	}
	if nd := w.dev[op.ID]; nd != nil { // not refused: the new owner frees it at once
		if f := w.freeFresh(op, nd); f != nil {
			return true, f
		}
	}
	if err := w.rig.Dev.StreamSynchronize(uintptr(s)); err != nil {
		return true, unexpected("cuStreamSynchronize", err)
	}
	w.synced(op.S)
	if bf.busy >= 0 { // ordered after another stream's work (the legacy mix): checked later
		return true, nil
	}
	w.checkedBytes += int64(len(bf.b))
	const what = "pool buffer bytes (an old owner's copy out of a block reused at once)"
	return true, compare(what, op.B, bf.b, bf.want, 0)
}

// freeFresh frees block nd, just allocated on op.S with nothing queued by its owner, with Free
// (op.Flag) or FreeAsync on op.T, whose work the fake then runs. The contract allows either
// before S has run: the heap orders the free's memset after the block's stream.
func (w *world) freeFresh(op Op, nd *dblock) *Failure {
	if op.Flag {
		if err := w.heap.Free(nd.p); err != nil {
			return unexpected("device.Heap.Free", err)
		}
	} else {
		t := w.streams[op.T]
		if err := w.heap.FreeAsync(nd.p, t); err != nil {
			return unexpected("device.Heap.FreeAsync", err)
		}
		marks := [2]mark{{op.T, w.tick()}, {nd.busy, nd.busyAt}}
		w.devFreed = append(w.devFreed, freed{n: nd.n, marks: marks})
		w.crossFrees[nd.alloc]++
		w.rig.F.CompleteStream(uintptr(t)) // the memset runs now, after what it waits for
		w.synced(op.T)
	}
	delete(w.dev, op.ID)
	w.devID = removeID(w.devID, op.ID)
	w.devLive -= nd.n
	return nil
}
