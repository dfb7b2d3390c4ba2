package cudamem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostRegisterCommitInFlightAtRelease: a Release of a HostRegister region while a
// Commit of it is in flight (stopped in its cuMemHostRegister, PauseNextCall) waits for the
// Commit, then gives everything back; a Commit, Prefault or Decommit of the region made while
// it waits is refused with arena.ErrInvalid and calls no driver. Before, the Release unmapped
// the region under the Commit, whose registration then came after the munmap (into whatever a
// Reserve had mapped there since), recorded for a region no longer live.
func TestFakeHostRegisterCommitInFlightAtRelease(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	r, err := p.Reserve(8<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(r, 4<<20, 2<<20))
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
	restore := cudamem.SetHostRegisterReleaseWaitHook(func() {
		calls := p.Counters().Calls
		late = []error{p.Commit(r, 2<<20, 2<<20), p.Prefault(r, 2<<20, 2<<20), p.Decommit(r, 4<<20, 2<<20)}
		if n := p.Counters().Calls; n != calls {
			t.Errorf("calls on a region being released made %d driver calls", n-calls)
		}
		close(waiting)
	})
	defer restore()
	release := make(chan error, 1)
	go func() { release <- p.Release(r) }()
	select {
	case <-waiting:
	case err := <-release: // it did not wait
		t.Errorf("Release with a Commit of the region in flight returned (%v) before the Commit", err)
		release <- err
	}
	f.ResumeCall()
	if err := <-commit; err != nil {
		t.Errorf("the Commit in flight when Release came: %v", err)
	}
	if err := <-release; err != nil {
		t.Errorf("Release: %v", err)
	}
	for i, err := range late {
		if !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s of a region being released: %v, want arena.ErrInvalid",
				[]string{"Commit", "Prefault", "Decommit"}[i], err)
		}
	}
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("after Release: provider %+v, fake %d registrations", c, f.Stat(fakecuda.Registrations))
	}
}
