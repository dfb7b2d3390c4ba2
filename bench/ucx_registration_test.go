package main

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// countingMapper is a UCX context whose MemMap fails once failAt registrations are live, and
// which counts those made and undone.
type countingMapper struct {
	*ucx.Context
	failAt           int
	mapped, unmapped int
}

var errMapRefused = errors.New("ucp_mem_map refused (test)")

func (c *countingMapper) MemMap(addr, n uintptr, memType int, nonblock bool) (ucx.Mem, error) {
	if c.mapped-c.unmapped == c.failAt {
		return 0, errMapRefused
	}
	m, err := c.Context.MemMap(addr, n, memType, nonblock)
	if err == nil {
		c.mapped++
	}
	return m, err
}

func (c *countingMapper) MemUnmap(m ucx.Mem) error {
	c.unmapped++
	return c.Context.MemUnmap(m)
}

// TestRegistrationRoundFailingMidwayClosesAll: a registration round whose per-buffer
// registration fails partway returns that error having undone the ucp_mem_map registrations it
// made and freed its buffers and closed its pool. They were left behind: locked memory under
// the later steps, and the registration step's ucp_cleanup then aborted the whole run (UCX's
// assertion on a registration in use).
func TestRegistrationRoundFailingMidwayClosesAll(t *testing.T) {
	w, err := remote.New(remote.Options{Name: "bench-test"})
	if err != nil {
		t.Skipf("no UCX: %v", err)
	}
	defer w.Close()
	uc, err := ucx.NewContext("bench-test-registration")
	if err != nil {
		t.Skipf("no UCX: %v", err)
	}
	m := &countingMapper{Context: uc, failAt: 5}
	defer func() {
		if m.mapped == m.unmapped { // else ucp_cleanup aborts the process on the live ones
			uc.Close()
		}
	}()
	var pool *pinned.Pool
	newPool := func() (*pinned.Pool, error) {
		var err error
		pool, err = ucxPool(nil)
		return pool, err
	}
	_, err = registrationRound(w, m, newPool, 10, 16<<10)
	if !errors.Is(err, errMapRefused) {
		t.Fatalf("the round's error: %v, want the refused ucp_mem_map's", err)
	}
	if m.mapped != 5 || m.unmapped != m.mapped {
		t.Errorf("%d ucp_mem_map registrations made, %d undone: want 5, all undone", m.mapped, m.unmapped)
	}
	if pool == nil {
		t.Fatal("no pool made")
	}
	if err := pool.Close(); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("the round's pool was left open (a Close after it: %v)", err)
	}

	m.failAt = -1 // a round that succeeds closes all too
	mapped, unmapped := m.mapped, m.unmapped
	f, err := registrationRound(w, m, newPool, 10, 16<<10)
	if err != nil || f.eachMaps != 10 || f.poolTime <= 0 || f.eachKeys <= 0 ||
		m.mapped-mapped != 10 || m.unmapped-unmapped != 10 {
		t.Errorf("a whole round: %+v, %v; %d registrations made, %d undone, want 10, all undone",
			f, err, m.mapped-mapped, m.unmapped-unmapped)
	}
	if err := pool.Close(); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("the round's pool was left open (a Close after it: %v)", err)
	}
}
