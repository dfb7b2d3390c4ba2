package cudamem

// wholeRegions: the providers whose every region is one driver allocation (HostAlloc,
// DeviceMalloc, Managed) share it: it reserves by allocating, cannot align or decommit, and
// frees at Release.

import (
	"fmt"
	"os"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/align"
)

// wholeRegions is a provider whose every region is one driver allocation, committed at
// Reserve and freed at Release: it cannot align or decommit.
type wholeRegions struct {
	cudaBase
	page  uintptr
	alloc func(size uintptr) (uintptr, error)
	free  func(addr uintptr) error
	op    string // the allocating call, for errors

	mu sync.Mutex // guards the regions' Handle: Release claims it, Commit and Decommit read it
}

// init sets up w, its cudaBase set up already.
func (w *wholeRegions) init(op string, alloc func(uintptr) (uintptr, error), free func(uintptr) error) {
	w.page, w.op, w.alloc, w.free = uintptr(os.Getpagesize()), op, alloc, free
}

// Caps implements arena.Provider.
func (w *wholeRegions) Caps() arena.Caps { return arena.Caps{Granule: w.page} }

// Reserve implements arena.Provider: one allocation of size bytes (rounded up to the granule); the
// alignment is not honoured (arena.Caps.Aligns is false: the arena's grid needs none).
func (w *wholeRegions) Reserve(size, _ uintptr) (*arena.Region, error) {
	defer w.dev.RelaxCapture()() // beside a user's capture: doc.go
	n, err := align.Up(size, w.page)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%w: reserve %d bytes", arena.ErrInvalid, size)
	}
	size = n
	addr, err := w.alloc(size)
	if err = w.call(&w.allocations, 1, err); err != nil {
		return nil, w.driverError(arena.ErrReserve, w.op, size, err)
	}
	w.committed.Add(int64(size))
	return &arena.Region{Base: addr, Size: size, Committed: true, Handle: w}, nil
}

// Commit implements arena.Provider: regions are committed whole already. A region not
// reserved by the provider, or released, is refused with arena.ErrInvalid.
func (w *wholeRegions) Commit(r *arena.Region, off, size uintptr) error {
	return w.mine(r, off, size)
}

// Decommit implements arena.Provider: nothing can be given back short of Release. A region
// not reserved by the provider, or released, is refused with arena.ErrInvalid.
func (w *wholeRegions) Decommit(r *arena.Region, off, size uintptr) error {
	return w.mine(r, off, size)
}

// mine checks that [off, off+size) lies in r, a region the provider reserved and has not
// released (Release clears its Handle).
func (w *wholeRegions) mine(r *arena.Region, off, size uintptr) error {
	if err := r.CheckRange(off, size); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.Handle != w {
		return fmt.Errorf("%w: region not from this provider or already released", arena.ErrInvalid)
	}
	return nil
}

// ReleaseKept implements arena.KeptReleaser: it destroys the streams the provider keeps for its
// clears (DeviceMalloc, Managed). Arena.Close calls it; a stream the driver refuses to destroy
// is kept, for the next call.
func (w *wholeRegions) ReleaseKept() error {
	defer w.dev.RelaxCapture()() // beside a user's capture: doc.go
	return w.dropStreams()
}

// Release implements arena.Provider. It claims the region before it frees it: a Release of it
// racing this one, or after it, is refused with arena.ErrInvalid and frees nothing (the driver
// may have handed the address to a new region by then). One the driver refuses gives the
// region back, for a later Release, and returns an error wrapping arena.ErrCommit
// (arena.GiveBackRefused) and the driver's.
func (w *wholeRegions) Release(r *arena.Region) error {
	defer w.dev.RelaxCapture()() // beside a user's capture: doc.go
	w.mu.Lock()
	if r == nil || r.Handle != w {
		w.mu.Unlock()
		return fmt.Errorf("%w: region not from this provider or already released", arena.ErrInvalid)
	}
	r.Handle = nil
	w.mu.Unlock()
	if err := w.call(&w.allocations, -1, w.free(r.Base)); err != nil {
		w.mu.Lock()
		r.Handle = w
		w.mu.Unlock()
		return arena.GiveBackRefused(fmt.Errorf("freeing %d bytes at %#x: %w", r.Size, r.Base, err))
	}
	w.committed.Add(-int64(r.Size))
	return nil
}
