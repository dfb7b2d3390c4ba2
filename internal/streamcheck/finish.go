package streamcheck

import (
	"errors"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// The operations that end a stream's life (Recreate) and the run's (finish).

// recreate synchronizes stream slot op.S, forgets it everywhere, destroys it and makes a new
// one in its slot. While blocks allocated on it are live, the heap must refuse to forget it
// (heap.ErrLiveBlocks), and while tier blocks are acquired on it the tier must (ErrAcquired):
// then the stream stays.
func (w *world) recreate(op Op, s pubcuda.Stream) (bool, *Failure) {
	if op.S == w.legacySlot() { // never destroyed
		return false, nil
	}
	if err := w.rig.Dev.StreamSynchronize(uintptr(s)); err != nil {
		return true, unexpected("cuStreamSynchronize", err)
	}
	w.synced(op.S)
	for _, d := range w.dev {
		if d.alloc == op.S {
			return true, wantErr("device.Heap.ForgetStream of a stream with live blocks", w.heap.ForgetStream(s), heap.ErrLiveBlocks)
		}
	}
	for _, u := range w.tb {
		if u.pins > 0 && u.acq == op.S {
			return true, wantErr("uvm.Tier.ForgetStream of a stream with acquired blocks", w.tier.ForgetStream(s), uvm.ErrAcquired)
		}
	}
	err := w.heap.ForgetStream(s)
	if errors.Is(err, heap.ErrLiveBlocks) && w.crossFrees[op.S] > 0 {
		// A block allocated on s whose free was queued on another stream counts as live until
		// the heap polls that stream's frees (device.Stats: "a deferred free counts until it
		// is done"), which ForgetStream(s) does not: the stream stays.
		w.counts["ForgetStream refused: a free of its block queued on another stream"]++
		return true, nil
	}
	if err != nil {
		return true, unexpected("device.Heap.ForgetStream", err)
	}
	if err := w.tier.ForgetStream(s); err != nil {
		return true, unexpected("uvm.Tier.ForgetStream", err)
	}
	if f, ok := any(w.pool).(streamForgetter); ok {
		if err := f.ForgetStream(s); err != nil {
			return true, unexpected("pinned.Pool.ForgetStream", err)
		}
	}
	if err := w.rig.Dev.StreamDestroy(uintptr(s)); err != nil {
		return true, unexpected("cuStreamDestroy", err)
	}
	ns, err := w.rig.Dev.StreamCreate(!w.blocking(op.S))
	if err != nil {
		w.streams = append(w.streams[:op.S], w.streams[op.S+1:]...) // keeps abandon from destroying it twice
		return true, unexpected("cuStreamCreate", err)
	}
	w.streams[op.S] = pubcuda.Stream(ns)
	w.crossFrees[op.S] = 0
	return true, nil
}

// finish ends a run: every stream passes, every object is checked and freed, the tier, heap
// and pool are closed, and the quotas must admit their whole size again.
func (w *world) finish() *Failure {
	w.rig.F.Hold(false)
	w.hold = false
	w.rig.F.Complete()
	w.completed()
	if f := w.check(); f != nil {
		return f
	}
	// Each object leaves its map and its ID list together, so that abandon, after a failure
	// here, meets only the objects still live.
	for len(w.tbID) > 0 {
		id := w.tbID[0]
		u := w.tb[id]
		for ; u.pins > 0; u.pins-- {
			if err := w.tier.Release(u.h, w.streams[u.acq]); err != nil {
				return unexpected("uvm.Tier.Release", err)
			}
		}
		w.tierPinned -= u.n
		if u.want != nil {
			if f := w.finalRead(id, u); f != nil {
				return f
			}
		}
		if err := w.tier.Free(u.h); err != nil {
			return unexpected("uvm.Tier.Free", err)
		}
		delete(w.tb, id)
		w.tbID = w.tbID[1:]
	}
	if err := w.tier.Close(); err != nil {
		return unexpected("uvm.Tier.Close", err)
	}
	if _, err := w.tier.Alloc(4096); !errors.Is(err, uvm.ErrClosed) {
		return wantErr("uvm.Tier.Alloc after Close", err, uvm.ErrClosed)
	}
	w.tier = nil
	if tp := w.tierPool; tp != nil {
		if st := tp.Stats(); st.Live != 0 || st.Deferred != 0 {
			return failf("the tier's host pool at the end", "%d buffers live, %d deferred after the tier's Close", st.Live, st.Deferred)
		}
		if err := tp.Close(); err != nil {
			return unexpected("pinned.Pool.Close (the tier's)", err)
		}
		w.tierPool = nil
	}
	if err := w.mv.Close(); err != nil {
		return unexpected("copyengine.Batcher.Close", err)
	}
	w.mv = nil
	for len(w.bufID) > 0 {
		id := w.bufID[0]
		if err := w.pool.Free(w.bufs[id].b); err != nil {
			return unexpected("pinned.Pool.Free", err)
		}
		w.poolLive -= len(w.bufs[id].b)
		delete(w.bufs, id)
		w.bufID = w.bufID[1:]
	}
	if q := int(w.cfg.PoolQuota); q > 0 { // before anything (Stats) reclaims the deferred buffers
		b, err := w.pool.Alloc(q)
		if err != nil {
			return failf("pool quota refused with nothing live", "Alloc(%d) after every buffer was freed and every stream passed: %v", q, err)
		}
		if err := w.pool.Free(b); err != nil {
			return unexpected("pinned.Pool.Free", err)
		}
	}
	for len(w.devID) > 0 {
		id := w.devID[0]
		if err := w.heap.Free(w.dev[id].p); err != nil {
			return unexpected("device.Heap.Free", err)
		}
		w.devLive -= w.dev[id].n
		delete(w.dev, id)
		w.devID = w.devID[1:]
	}
	if err := w.heap.Trim(); err != nil {
		return unexpected("device.Heap.Trim", err)
	}
	if q := w.cfg.DeviceQuota; q > 0 {
		p, err := w.heap.Alloc(int(q), w.streams[0])
		if err != nil {
			return failf("device quota refused with nothing live", "Alloc(%d) after every block was freed: %v", q, err)
		}
		if err := w.heap.Free(p); err != nil {
			return unexpected("device.Heap.Free", err)
		}
	}
	for _, s := range w.streams {
		if err := w.heap.ForgetStream(s); err != nil {
			return unexpected("device.Heap.ForgetStream", err)
		}
		if f, ok := any(w.pool).(streamForgetter); ok {
			if err := f.ForgetStream(s); err != nil {
				return unexpected("pinned.Pool.ForgetStream", err)
			}
		}
	}
	if err := w.heap.Close(); err != nil {
		return unexpected("device.Heap.Close", err)
	}
	if _, err := w.heap.Alloc(4096, w.streams[0]); !errors.Is(err, device.ErrClosed) {
		return wantErr("device.Heap.Alloc after Close", err, device.ErrClosed)
	}
	w.heap = nil
	if st := w.pool.Stats(); st.Live != 0 || st.Deferred != 0 {
		return failf("pool stats at the end", "%d live, %d deferred after every buffer was freed and every stream passed", st.Live, st.Deferred)
	}
	if err := w.pool.Close(); err != nil {
		return unexpected("pinned.Pool.Close", err)
	}
	if _, err := w.pool.Alloc(4096); !errors.Is(err, pinned.ErrClosed) {
		return wantErr("pinned.Pool.Alloc after Close", err, pinned.ErrClosed)
	}
	w.pool = nil
	for i, s := range w.streams {
		if s == legacyStream {
			continue
		}
		if err := w.rig.Dev.StreamDestroy(uintptr(s)); err != nil {
			w.streams = w.streams[i+1:]
			return unexpected("cuStreamDestroy", err)
		}
	}
	w.streams = nil
	w.closed = true
	return nil
}

// finalRead checks the bytes of tier block u (object id) at the end: on the host (AcquireHost),
// or, when the tier's host pool is too full to copy it there (its quota, TierHostQuota), on
// the device, acquired for reading on the first stream.
func (w *world) finalRead(id int, u *ublock) *Failure {
	b, err := w.tier.AcquireHost(u.h, uvm.Read)
	if errors.Is(err, uvm.ErrHostFull) && w.tierPool != nil {
		p, err := w.tier.Acquire(u.h, w.streams[0], uvm.Read)
		if err != nil {
			return unexpected("uvm.Tier.Acquire", err)
		}
		got := make([]byte, u.n)
		err = w.heap.DtoHAsync(got, p, w.streams[0])
		f := compare("tier block bytes (at the end, on the device)", id, got, u.want, 0)
		if err != nil {
			f = unexpected("device.Heap.DtoHAsync of an acquired tier block", err)
		}
		if err := w.tier.Release(u.h, w.streams[0]); err != nil && f == nil {
			f = unexpected("uvm.Tier.Release", err)
		}
		return f
	}
	if err != nil {
		return unexpected("uvm.Tier.AcquireHost", err)
	}
	f := compare("tier block bytes (at the end)", id, b, u.want, 0)
	if err := w.tier.ReleaseHost(u.h); err != nil && f == nil {
		f = unexpected("uvm.Tier.ReleaseHost", err)
	}
	return f
}
