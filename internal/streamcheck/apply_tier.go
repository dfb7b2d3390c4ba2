package streamcheck

import (
	"errors"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// The tier's operations, applied to the tier and the model.

func (w *world) tierOp(op Op, s pubcuda.Stream) (bool, *Failure) {
	if op.Kind == TierAlloc {
		if len(w.tb) >= maxTierBlocks || op.N <= 0 || w.tierBytes+op.N > 3*int(w.cfg.TierBudget) {
			return false, nil
		}
		h, err := w.tier.Alloc(op.N)
		if err != nil {
			return true, unexpected("uvm.Tier.Alloc", err)
		}
		w.tb[op.ID] = &ublock{h: h, n: op.N, acq: -1, busy: -1}
		w.tbID = insertID(w.tbID, op.ID)
		w.tierBytes += op.N
		return true, nil
	}
	if op.Kind == TierEvict || op.Kind == TierPrefetch {
		var hs []uvm.Handle
		for _, id := range []int{op.A, op.B, op.Off} {
			if u := w.tb[id]; u != nil && u.pins == 0 {
				hs = append(hs, u.h)
			}
		}
		if len(hs) == 0 {
			return false, nil
		}
		if op.Kind == TierEvict {
			err := w.tier.Evict(hs)
			if err != nil && !errors.Is(err, uvm.ErrHostFull) {
				return true, unexpected("uvm.Tier.Evict", err)
			}
			w.count("tier evict", err)
			return true, nil
		}
		err := w.tier.Prefetch(hs, s)
		if err != nil && !errors.Is(err, uvm.ErrAllPinned) && !errors.Is(err, uvm.ErrTooLarge) && !errors.Is(err, uvm.ErrHostFull) && !deviceFull(err) {
			return true, unexpected("uvm.Tier.Prefetch", err)
		}
		w.count("tier prefetch", err)
		return true, nil
	}
	u := w.tb[op.A]
	if u == nil {
		return false, nil
	}
	switch op.Kind {
	case TierAcquire:
		return w.tierAcquire(op, u, s)
	case TierRelease:
		if u.pins == 0 {
			return false, nil
		}
		if err := w.tier.Release(u.h, w.streams[u.acq]); err != nil {
			return true, unexpected("uvm.Tier.Release", err)
		}
		if u.pins--; u.pins == 0 {
			u.acq = -1
			w.tierPinned -= u.n
		}
	case TierWrongRelease:
		if u.pins == 0 {
			return true, wantErr("uvm.Tier.Release of a block not acquired", w.tier.Release(u.h, s), uvm.ErrNotAcquired)
		}
		if u.acq == op.S {
			return false, nil
		}
		return true, wantErr("uvm.Tier.Release on another stream", w.tier.Release(u.h, s), uvm.ErrWrongStream)
	case TierHost:
		if u.pins > 0 {
			return false, nil
		}
		mode := uvm.Read
		if op.Flag {
			mode = uvm.Write
		}
		b, err := w.tier.AcquireHost(u.h, mode)
		if errors.Is(err, uvm.ErrHostFull) {
			w.counts["tier host full"]++
			return true, nil
		}
		if err != nil {
			return true, unexpected("uvm.Tier.AcquireHost", err)
		}
		if u.want != nil {
			if f := compare("tier block bytes (AcquireHost)", op.A, b, u.want, 0); f != nil {
				_ = w.tier.ReleaseHost(u.h)
				return true, f
			}
		}
		if op.Flag {
			u.want = make([]byte, u.n)
			stamp(u.want, op.V)
			copy(b, u.want)
		}
		if err := w.tier.ReleaseHost(u.h); err != nil {
			return true, unexpected("uvm.Tier.ReleaseHost", err)
		}
	case TierFree, TierDoubleFree:
		if err := w.tier.Free(u.h); err != nil {
			return true, unexpected("uvm.Tier.Free", err)
		}
		if op.Kind == TierDoubleFree {
			if f := wantErr("uvm.Tier.Free twice", w.tier.Free(u.h), uvm.ErrInvalidHandle); f != nil {
				return true, f
			}
		}
		if u.pins > 0 {
			w.tierPinned -= u.n
		}
		delete(w.tb, op.A)
		w.tbID = removeID(w.tbID, op.A)
		w.tierBytes -= u.n
	}
	return true, nil
}

func (w *world) count(what string, err error) {
	if err != nil {
		w.counts[what+": "+errorClass(err)]++
	}
}

// deviceFull reports the shared device heap refusing the tier VRAM: out of memory, or its quota
// (which the user's blocks and the tier's share) used up.
func deviceFull(err error) bool {
	return errors.Is(err, device.ErrOutOfMemory) || errors.Is(err, device.ErrQuota)
}

func errorClass(err error) string {
	for _, e := range []error{uvm.ErrHostFull, uvm.ErrAllPinned, uvm.ErrTooLarge, device.ErrOutOfMemory, device.ErrQuota} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

func (w *world) tierAcquire(op Op, u *ublock, s pubcuda.Stream) (bool, *Failure) {
	if u.pins > 0 && u.acq != op.S || u.pins == 0 && (!w.usable(u.busy, op.S) || w.tierPinned+u.n > int(w.cfg.TierBudget)/2) {
		return false, nil
	}
	var bf *pbuf
	if op.Flag && op.B >= 0 {
		if bf = w.bufs[op.B]; bf != nil && !w.usable(bf.busy, op.S) {
			bf = nil
		}
	}
	mode := uvm.Read
	if op.Flag {
		mode = uvm.Write
	}
	p, err := w.tier.Acquire(u.h, s, mode)
	if errors.Is(err, uvm.ErrAllPinned) || deviceFull(err) || errors.Is(err, uvm.ErrHostFull) {
		w.count("tier acquire", err)
		return true, nil
	}
	if err != nil {
		return true, unexpected("uvm.Tier.Acquire", err)
	}
	if u.pins > 0 && p != u.ptr {
		return true, failf("acquired tier block moved", "block #%d from %#x to %#x", op.A, u.ptr, p)
	}
	if u.pins == 0 {
		w.tierPinned += u.n
	}
	u.pins++
	u.acq, u.ptr, u.busy, u.busyAt = op.S, p, op.S, w.tick()
	if !op.Flag {
		if u.want != nil {
			got := make([]byte, u.n)
			if err := w.heap.DtoHAsync(got, p, s); err != nil {
				return true, unexpected("device.Heap.DtoHAsync of an acquired tier block", err)
			}
			u.busyAt = w.queue(op.S).at
			if f := compare("tier block bytes (acquired for reading)", op.A, got, u.want, 0); f != nil {
				return true, f
			}
		}
		return true, nil
	}
	want := make([]byte, u.n)
	fill(want, byte(op.V))
	if err := w.heap.MemsetAsync(p, byte(op.V), int(u.n), s); err != nil {
		return true, unexpected("device.Heap.MemsetAsync of an acquired tier block", err)
	}
	u.busyAt = w.queue(op.S).at
	if bf != nil {
		n := min(len(bf.b), u.n)
		if err := w.heap.HtoDAsync(p, bf.b[:n], s); err != nil {
			return true, unexpected("device.Heap.HtoDAsync to an acquired tier block", err)
		}
		copy(want, bf.want[:n])
		u.busyAt = w.queue(op.S).at
		bf.busy, bf.busyAt = op.S, u.busyAt
	}
	u.want = want
	return true, nil
}
