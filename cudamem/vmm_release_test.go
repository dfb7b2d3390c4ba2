package cudamem_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeVMMCommitInFlightAtRelease: a Release of a VMM region while a Commit of it is in
// flight (stopped in its first driver call, PauseNextCall) waits for the Commit, then gives
// everything back; a Commit or Decommit of the region made while it waits is refused with
// arena.ErrInvalid and calls no driver. Before, the Release freed the address range under the
// Commit, which then mapped its granule into the freed range.
func TestFakeVMMCommitInFlightAtRelease(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, pr := range providersOf(d, "DeviceVMM", "HostVMM") {
		p, err := pr.new()
		must(t, pr.name, err)
		r, err := p.Reserve(4<<20, 2<<20)
		must(t, "Reserve", err)
		if !f.PauseNextCall() {
			t.Fatal("PauseNextCall: a pause is armed already")
		}
		commit := make(chan error, 1)
		go func() { commit <- p.Commit(r, 0, 2<<20) }()
		for !f.Paused() {
			time.Sleep(time.Millisecond)
		}
		waiting := make(chan struct{})
		var late []error
		restore := cudamem.SetVMMReleaseWaitHook(func() {
			calls := p.Counters().Calls
			late = []error{p.Commit(r, 2<<20, 2<<20), p.Decommit(r, 0, 2<<20)}
			if n := p.Counters().Calls; n != calls {
				t.Errorf("%s: a Commit and a Decommit of a region being released made %d driver calls", pr.name, n-calls)
			}
			close(waiting)
		})
		release := make(chan error, 1)
		go func() { release <- p.Release(r) }()
		var released error
		select {
		case <-waiting:
		case released = <-release: // it did not wait
			t.Errorf("%s: Release with a Commit of the region in flight returned (%v) before the Commit", pr.name, released)
			release <- released
		}
		f.ResumeCall()
		if err := <-commit; err != nil {
			t.Errorf("%s: the Commit in flight when Release came: %v", pr.name, err)
		}
		if err := <-release; err != nil {
			t.Errorf("%s: Release: %v", pr.name, err)
		}
		restore()
		for i, err := range late {
			if !errors.Is(err, arena.ErrInvalid) {
				t.Errorf("%s: %s of a region being released: %v, want arena.ErrInvalid", pr.name, []string{"Commit", "Decommit"}[i], err)
			}
		}
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after Release: %+v", pr.name, c)
		}
	}
	if n := f.Stat(fakecuda.Reservations); n != 0 {
		t.Errorf("the fake holds %d reservations", n)
	}
}

// TestFakeVMMCommitRacesRelease: a Commit and a Decommit racing a Release of the same VMM
// region (a misuse: the arena never makes them at once) each either runs before the Release,
// which then gives back what it mapped, or is refused with arena.ErrInvalid; the race detector
// finds no unsynchronized access. Before, Commit and Decommit read the region's Handle without
// the lock under which Release clears it.
func TestFakeVMMCommitRacesRelease(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	for i := 0; i < 20; i++ {
		r, err := p.Reserve(4<<20, 2<<20)
		must(t, "Reserve", err)
		must(t, "Commit", p.Commit(r, 0, 2<<20))
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for j, call := range []func() error{
			func() error { return p.Commit(r, 2<<20, 2<<20) },
			func() error { return p.Decommit(r, 0, 2<<20) },
			func() error { return p.Release(r) },
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = call()
			}()
		}
		wg.Wait()
		for j, err := range errs[:2] {
			if err != nil && !errors.Is(err, arena.ErrInvalid) {
				t.Errorf("%s racing Release: %v, want nil or arena.ErrInvalid", []string{"Commit", "Decommit"}[j], err)
			}
		}
		if errs[2] != nil {
			t.Errorf("Release racing a Commit and a Decommit: %v", errs[2])
		}
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Fatalf("after Release: %+v", c)
		}
	}
}
