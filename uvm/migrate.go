package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// completion is a batch queued on one of the tier's streams: when its event completes, the
// batch's copies are done and the memory it lists can be reused.
type completion struct {
	dir int
	seq uint64
	dev []devBlock // VRAM no longer used once the event completes: spare (spare.go)
	// devBytes is the bytes of dev, when the batch added them up (0: not counted)
	devBytes uintptr
	host     [][]byte // host buffers to give back to the pool
}

// devBlock is a block of VRAM and its size.
type devBlock struct {
	p    cuda.DevicePtr
	size uintptr
}

// complete finishes a batch whose event has completed (the queue's done function).
func (t *Tier) complete(c completion) error {
	if c.seq > t.doneSeq[c.dir] {
		t.doneSeq[c.dir] = c.seq
	}
	err := t.putSpares(c.dev, c.devBytes)
	for _, b := range c.host {
		if ferr := t.pool.Free(b); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	if len(c.dev)+len(c.host) > 0 {
		t.signal()
	}
	return err
}

// devList returns an empty list for a completion's VRAM: a recycled one with room for n blocks
// if there is one, else any recycled one, else a new one of launchJobs; appends grow it, so
// that no large allocation delays a batch's first copy.
func (t *Tier) devList(n int) []devBlock {
	k := len(t.devLists) - 1
	for i := k; i >= 0; i-- {
		if cap(t.devLists[i]) >= n {
			k = i
			break
		}
	}
	if k < 0 {
		return make([]devBlock, 0, launchJobs)
	}
	l := t.devLists[k]
	t.devLists[k] = t.devLists[len(t.devLists)-1]
	t.devLists[len(t.devLists)-1] = nil
	t.devLists = t.devLists[:len(t.devLists)-1]
	return l
}

// retire queues c on the D2H stream behind t.waits: its memory is given back once every use
// and copy before it is done. t.mu is held.
func (t *Tier) retire(c completion) error {
	if err := t.queueWaits(t.d2h); err != nil {
		// The waits cannot be queued: wait for the streams themselves, on the CPU.
		for _, w := range t.waits {
			if serr := t.dev.EventSynchronize(w.ev); serr != nil {
				return errors.Join(err, serr)
			}
		}
		return t.complete(completion{dir: c.dir, dev: c.dev, host: c.host})
	}
	return t.push(dirD2H, c)
}

// push records an event on the stream of dir and queues c behind it, as batch number
// t.seq[dir]+1. It returns the event (owned by the queue until the batch completes).
func (t *Tier) push(dir int, c completion) error {
	_, err := t.pushEvent(dir, c)
	return err
}

func (t *Tier) pushEvent(dir int, c completion) (cuda.Event, error) {
	s := t.h2d
	if dir == dirD2H {
		s = t.d2h
	}
	ev, err := t.events.Get()
	if err != nil {
		return 0, err
	}
	if err := t.dev.EventRecord(ev, s); err != nil {
		t.events.Put(ev)
		return 0, err
	}
	t.seq[dir]++
	c.dir, c.seq = dir, t.seq[dir]
	t.queue.PushEvent(s, ev, c)
	return ev, nil
}

// poll finishes the batches that have completed. t.mu is held.
func (t *Tier) poll() error {
	if t.queue.Len() == 0 {
		return nil
	}
	if err := t.queue.Poll(); err != nil {
		return fmt.Errorf("uvm: transfers: %w", err)
	}
	return nil
}

// launchJobs is how many copies a batch gathers before it queues them, so that the device
// copies the first blocks of a large batch while the CPU prepares the rest (a 64 MiB batch of
// 4 KiB blocks is 16,384 jobs). The first launches of a batch are smaller, firstLaunchJobs
// then twice as many each time up to launchJobs, so that the device starts sooner: nothing
// overlaps the preparation of the first launch (1024 jobs at about 25 ns each: 25 µs, where
// the kernel's 50 GB/s leaves a 64 MiB batch of 4 KiB blocks about 60 µs of slack to reach
// 48 GB/s, measured on an H100), and a 128-job launch is 10 µs of copying there, time enough
// for the CPU to prepare the next 256 jobs.
const (
	launchJobs      = 1024
	firstLaunchJobs = 128
)

// A restore is built in steps, so that Prefetch can check its handles a chunk at a time and
// start the copies of the first chunk before it has looked at the last handle: begin, then
// add (making room for the blocks first) any number of times, then finish, or abort on an
// error. The blocks of a restore are marked chosen by the caller until it finishes or aborts,
// so that no eviction it makes for room drops the host copies its copies read. A block that
// add gives VRAM counts in t.acct.device from then on, so that makeRoom for the next chunk
// sees it. t.mu is held throughout.
type restoring struct {
	jobs     []CopyJob // copies not queued yet (t.rjobs: an eviction for room uses t.jobs)
	launched bool      // copies queued: the VRAM goes back behind the H2D stream on abort
	launchAt int
}

func (t *Tier) beginRestore() restoring {
	return restoring{jobs: t.rjobs[:0], launchAt: firstLaunchJobs}
}

// addRestore gives the blocks ids (live, not on the device) VRAM and queues their copies, a
// launch at a time, after making room for their need bytes. On an error the caller aborts.
func (t *Tier) addRestore(r *restoring, ids []BlockID, need uintptr) error {
	if err := t.makeRoom(need); err != nil {
		return err
	}
	for _, id := range ids {
		b := &t.blocks[id]
		p, err := t.devAlloc(b.size)
		if err != nil {
			return err
		}
		b.dev = p
		t.acct.device += b.size
		if b.fresh {
			continue
		}
		if b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq) { // the host copy is still being written
			if err := t.dev.StreamWaitEvent(t.h2d, b.evictEv); err != nil {
				return fmt.Errorf("uvm: restore waits for an eviction: %w", err)
			}
		}
		r.jobs = append(r.jobs, CopyJob{Dst: p, Src: b.hostDev, Len: b.size})
		if len(r.jobs) == r.launchAt { // start the copies while the rest is prepared
			r.launched = true
			if err := t.mover.Copy(r.jobs, t.h2d); err != nil {
				t.st.Failures++
				return fmt.Errorf("uvm: restore of a batch of blocks: %w", err)
			}
			r.jobs, r.launchAt = r.jobs[:0], min(2*r.launchAt, launchJobs)
		}
	}
	return nil
}

// abortRestore gives back the VRAM the blocks ids got (behind the H2D stream once a copy was
// queued) and clears their marks: none of them has moved.
func (t *Tier) abortRestore(r *restoring, ids []BlockID) {
	t.rjobs = r.jobs[:0]
	if r.launched {
		t.undoRestore(ids)
	} else {
		for _, id := range ids { // nothing is queued yet: spare at once
			if b := &t.blocks[id]; b.dev != 0 {
				_ = t.putSpare(b.dev, b.size)
				b.dev = 0
				t.acct.device -= b.size
			}
		}
	}
	t.unchoose(ids)
}

// finishRestore queues the last copies of the blocks ids and the batch's event, and records
// the blocks as moved; for CausePrefetch the policy records a use of each. It returns the
// event, and whether any copy was queued. On an error it aborts: no block has moved.
func (t *Tier) finishRestore(r *restoring, ids []BlockID, cause Cause) (cuda.Event, bool, error) {
	var ev cuda.Event
	copied := len(r.jobs) > 0 || r.launched
	if copied {
		var err error
		if len(r.jobs) > 0 {
			r.launched = true // the Mover may have queued some before failing
			err = t.mover.Copy(r.jobs, t.h2d)
		}
		if err == nil {
			ev, err = t.pushEvent(dirH2D, completion{})
		}
		if err != nil {
			t.abortRestore(r, ids)
			t.st.Failures++
			return 0, false, fmt.Errorf("uvm: restore of %d blocks: %w", len(ids), err)
		}
	}
	t.rjobs = r.jobs[:0]
	now := t.now()
	used := cause == CausePrefetch
	for _, id := range ids {
		b := &t.blocks[id]
		b.chosen = false
		if b.fresh {
			b.fresh = false
			t.acct.fresh -= b.size
		} else {
			t.acct.hostOnly -= b.size
			b.readySeq, b.readyEv = t.seq[dirH2D], ev
			t.moved(id, b, true, cause, false, now)
		}
		if used {
			t.policy.Used(id)
		}
	}
	return ev, copied, nil
}

// restore brings the blocks ids (live, not on the device, need bytes together, marked chosen
// by the caller) to the device in one batch on the H2D stream, making room first (see
// restoring). On failure no block has moved.
func (t *Tier) restore(ids []BlockID, need uintptr, cause Cause) error {
	r := t.beginRestore()
	if err := t.addRestore(&r, ids, need); err != nil {
		t.abortRestore(&r, ids)
		return err
	}
	_, _, err := t.finishRestore(&r, ids, cause)
	return err
}

// undoRestore gives back the VRAM of a restore that failed. Copies into it may be queued on
// the H2D stream, so it goes back behind that stream.
func (t *Tier) undoRestore(ids []BlockID) {
	c := completion{}
	for _, id := range ids {
		if b := &t.blocks[id]; b.dev != 0 {
			c.dev = append(c.dev, devBlock{b.dev, b.size})
			b.dev = 0
			t.acct.device -= b.size
		}
	}
	if err := t.push(dirH2D, c); err != nil {
		_ = t.dev.StreamSynchronize(t.h2d)
		_ = t.complete(c)
	}
}

// devAlloc takes VRAM for a block: a spare block of its size, else from the device heap. When
// the heap refuses, it gives the spare blocks back to the heap and retries; then it finishes
// the evictions in flight (waiting for their copies) and evicts beyond the budget, then retries.
func (t *Tier) devAlloc(size uintptr) (cuda.DevicePtr, error) {
	for try := 0; ; try++ {
		if p := t.takeSpare(size); p != 0 {
			return p, nil
		}
		p, err := t.heap.Alloc(size, t.h2d)
		if err == nil {
			return p, nil
		}
		if outOfMemory(err) && t.spare.bytes > 0 { // spares of other sizes hold the memory
			if _, ferr := t.flushSpares(); ferr != nil {
				return 0, errors.Join(err, ferr)
			}
			if p, err = t.heap.Alloc(size, t.h2d); err == nil {
				return p, nil
			}
		}
		if !outOfMemory(err) || try == 3 {
			return 0, fmt.Errorf("uvm: device memory for a block of %d bytes: %w", size, err)
		}
		t.st.HeapPressure++
		if try > 0 { // finishing the evictions in flight was not enough: evict more
			if n := t.pickVictims(size); n < size {
				t.unchoose(t.victims)
				return 0, fmt.Errorf("%w: the device heap refused %d bytes and nothing more can be evicted: %w", ErrAllPinned, size, err)
			}
			if eerr := t.evict(t.victims, CauseHeapPressure); eerr != nil {
				return 0, eerr
			}
		}
		if derr := t.drain(); derr != nil {
			return 0, derr
		}
	}
}

func outOfMemory(err error) bool {
	return errors.Is(err, heap.ErrOutOfMemory) || errors.Is(err, cuda.ErrOutOfMemory)
}

// makeRoom evicts until need more bytes fit in the budget. t.mu is held.
func (t *Tier) makeRoom(need uintptr) error {
	if err := t.poll(); err != nil {
		return err
	}
	if t.acct.device+need <= t.budget {
		return nil
	}
	want := t.acct.device + need - t.budget
	if got := t.pickVictims(want); got < want {
		t.unchoose(t.victims)
		return fmt.Errorf("%w: %d bytes needed, %d evictable, %d of the budget %d acquired", ErrAllPinned,
			need, got, t.acct.pinned, t.budget)
	}
	return t.evict(t.victims, CausePressure)
}

// pickVictims fills t.victims with evictable blocks worth at least want bytes, if there are
// so many, and returns their bytes: clean blocks among the evictWindow coldest first, then
// any in policy order, then, if still short, blocks under thrash protection. The victims stay
// marked chosen until evict is done with them.
func (t *Tier) pickVictims(want uintptr) uintptr {
	t.victims = t.victims[:0]
	var got uintptr
	now := t.nowNanos()
	take := func(id BlockID) {
		b := &t.blocks[id]
		b.chosen = true
		t.victims = append(t.victims, id)
		got += b.size
	}
	seen := 0
	t.policy.Walk(func(id BlockID) bool {
		seen++
		if b := &t.blocks[id]; b.clean() && !t.protected(b, now) {
			take(id)
		}
		return got < want && seen < evictWindow
	})
	for pass := 0; pass < 2 && got < want; pass++ {
		t.policy.Walk(func(id BlockID) bool {
			if b := &t.blocks[id]; !b.chosen && (pass == 1 || !t.protected(b, now)) {
				if pass == 1 {
					t.st.ThrashOverrides++
				}
				take(id)
			}
			return got < want
		})
	}
	return got
}

// evict moves the blocks ids (evictable) off the device in one batch: dirty ones are copied to
// host buffers on the D2H stream after it waited for their uses; clean ones are dropped. The
// caller marks ids chosen (pickVictims), so that hostAlloc does not drop their host copies for
// room, and evict clears the marks when it returns. On failure no block has moved. t.mu is
// held.
func (t *Tier) evict(ids []BlockID, cause Cause) error { return t.evictBatch(ids, nil, cause) }

// evictBatch is evict of ids, or, when hs is not nil, of the blocks of the handles hs (for
// Evict): it checks each handle as it comes to it (ErrInvalidHandle, ErrAcquired), skipping
// blocks not on the device and duplicates, and marks the blocks chosen, so that the first
// copies are queued before the last handle is looked at; a bad handle fails the batch like a
// failed copy (no block has moved).
func (t *Tier) evictBatch(ids []BlockID, hs []Handle, cause Cause) error {
	jobs := t.jobs[:0]
	t.waits = t.waits[:0]
	n := len(ids)
	if hs != nil {
		ids, n = t.one[:0], len(hs)
	}
	c := completion{dev: t.devList(n)}
	copied := 0 // jobs whose copies are queued
	launchAt := firstLaunchJobs
	var err error
	ownErr := false // err is hostAlloc's (ErrHostFull) or a handle's, not a failed copy
	for i := 0; i < n; i++ {
		var id BlockID
		if hs != nil {
			var b *block
			if id, b, err = t.lookup(hs[i]); err == nil && b.pins > 0 {
				err = fmt.Errorf("%w: Evict of %#x", ErrAcquired, uint64(hs[i]))
			}
			if err != nil {
				ownErr = true
				break
			}
			if b.dev == 0 || b.chosen {
				continue
			}
			b.chosen = true
			ids = append(ids, id)
		} else {
			id = ids[i]
		}
		b := &t.blocks[id]
		t.addWaits(b)
		c.dev = append(c.dev, devBlock{b.dev, b.size})
		c.devBytes += b.size
		if b.clean() {
			continue
		}
		if b.host == nil {
			if err = t.hostAlloc(id, b); err != nil {
				ownErr = true
				break
			}
		}
		jobs = append(jobs, CopyJob{Dst: b.hostDev, Src: b.dev, Len: b.size})
		if len(jobs) == launchAt { // start the copies while the rest is prepared
			if err = t.queueWaits(t.d2h); err == nil {
				err = t.mover.Copy(jobs, t.d2h)
			}
			if err != nil {
				break
			}
			copied += len(jobs)
			jobs, t.waits = jobs[:0], t.waits[:0] // a stream's waits hold for all later work
			launchAt = min(2*launchAt, launchJobs)
		}
	}
	t.jobs = jobs[:0]
	if err == nil {
		if err = t.queueWaits(t.d2h); err == nil && len(jobs) > 0 {
			err = t.mover.Copy(jobs, t.d2h)
		}
		if err == nil {
			copied += len(jobs)
		}
	}
	if hs != nil {
		t.one = ids[:0]
	}
	if err == nil && len(ids) == 0 {
		t.devLists = append(t.devLists, c.dev[:0])
		return nil
	}
	var ev cuda.Event
	if err == nil {
		ev, err = t.pushEvent(dirD2H, c)
	}
	if err != nil {
		t.devLists = append(t.devLists, c.dev[:0])
		t.unchoose(ids)
		if copied > 0 { // copies into host buffers the blocks keep: let them land first
			_ = t.dev.StreamSynchronize(t.d2h)
		}
		if ownErr {
			return err
		}
		t.st.Failures++
		return fmt.Errorf("uvm: eviction of %d blocks (%d copied): %w", len(ids), copied, err)
	}
	now := t.now()
	for _, id := range ids {
		b := &t.blocks[id]
		b.chosen = false
		clean := b.clean()
		if !clean {
			b.evictSeq, b.evictEv, b.hostValid = t.seq[dirD2H], ev, true
		}
		b.dev = 0
		t.acct.device -= b.size
		t.acct.hostOnly += b.size
		t.putReleases(b)
		t.policy.Evicted(id)
		t.moved(id, b, false, cause, clean, now)
	}
	return nil
}

// hostAlloc gives b a host buffer. When the pool is out of memory (pinned.ErrOutOfMemory: its
// capacity is used, or the driver refused to pin more) it drops host copies of clean blocks on
// the device (they become dirty), then retries; it fails with ErrHostFull. t.mu is held.
func (t *Tier) hostAlloc(id BlockID, b *block) error {
	buf, err := t.pool.Alloc(int(b.size))
	if err != nil && errors.Is(err, pinned.ErrOutOfMemory) && t.dropHostCopies(b.size) {
		buf, err = t.pool.Alloc(int(b.size))
	}
	if err != nil {
		if errors.Is(err, pinned.ErrOutOfMemory) || errors.Is(err, pinned.ErrTooLarge) {
			return fmt.Errorf("%w: host buffer of %d bytes for block %#x: %w", ErrHostFull, b.size, t.handle(id), err)
		}
		return fmt.Errorf("uvm: host buffer of %d bytes: %w", b.size, err)
	}
	addr := uintptr(0)
	if len(buf) > 0 {
		addr = mem.Addr(buf)
	}
	dp := addr
	if !t.unified {
		if dp, err = t.dev.MemHostGetDevicePointer(addr); err != nil {
			_ = t.pool.Free(buf)
			return fmt.Errorf("uvm: device address of a host buffer: %w", err)
		}
	}
	b.host, b.hostDev, b.hostValid = buf, dp, false
	t.acct.hostHeld += b.size
	return nil
}

// dropHostCopies frees host copies of clean, unacquired blocks on the device, not in flight,
// worth at least want bytes if it can; it reports whether it freed any.
func (t *Tier) dropHostCopies(want uintptr) bool {
	var got uintptr
	for i := range t.blocks {
		b := &t.blocks[i]
		if !b.live || b.dev == 0 || b.host == nil || b.hostPins > 0 || b.chosen ||
			(b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) || (b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq)) {
			continue
		}
		if t.pool.Free(b.host) != nil {
			continue
		}
		b.host, b.hostDev, b.hostValid = nil, 0, false
		t.acct.hostHeld -= b.size
		t.st.HostCopiesDropped++
		if got += b.size; got >= want {
			break
		}
	}
	return got > 0
}

// unchoose clears the chosen marks of ids.
func (t *Tier) unchoose(ids []BlockID) {
	for _, id := range ids {
		t.blocks[id].chosen = false
	}
}
