package ipcpool

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

// The fence word is any process's to write: a scribbler sets it to 2^64-1 while no owner runs,
// and the owner that adopts the pool takes it as its epoch. Its next fence cannot go past it
// (the epoch wrapped to 0, and every process then counted as having passed the fence, so the
// grants went free while a stream could still use them): they stay fenced, even once a
// process writes the last epoch as passed.
func TestForgedFenceAtAdoptionKeepsGrantsFenced(t *testing.T) {
	w := adoptAfterScribble(t, func(p *Process) { p.c.store(hFence, math.MaxUint64) })
	w.mu.Lock()
	defer w.mu.Unlock()
	g := slices.IndexFunc(w.table, func(t grantState) bool { return t.state == gFree })
	if g < 0 {
		t.Fatal("no free grant to fence")
	}
	// A fence that waits for the owner's own slot, as if its process had a device.
	flags := w.c.slotLoad(0, sFlags)
	w.c.slotStore(0, sFlags, flags|flagDevice)
	defer w.c.slotStore(0, sFlags, flags)
	w.c.slotStore(0, sFence, 0) // it has passed no fence
	w.fence([]int{g})
	if w.epoch != math.MaxUint64 || w.c.load(hFence) != math.MaxUint64 {
		t.Errorf("after the fence: epoch %#x, fence word %#x; want both left at 2^64-1", w.epoch, w.c.load(hFence))
	}
	w.unfence()
	if w.table[g].state != gFenced {
		t.Fatalf("grant %d is %v right after its fence, which no process has passed: want fenced", g, w.table[g].state)
	}
	w.c.slotStore(0, sFence, math.MaxUint64) // the process writes the epoch it sees as passed
	w.unfence()
	if w.table[g].state != gFenced {
		t.Errorf("grant %d is %v: no fence can be told passed at the last epoch, want it kept fenced", g, w.table[g].state)
	}
}

// Grants kept fenced at the last epoch never come back, so a request the pool cannot serve
// fails at once with ErrPoolFull instead of waiting out its time for them.
func TestForgedFenceAtAdoptionFailsFullRequestsAtOnce(t *testing.T) {
	w := adoptAfterScribble(t, func(p *Process) { p.c.store(hFence, math.MaxUint64) })
	w.mu.Lock()
	var free []int
	for g, st := range w.table {
		if st.state == gFree {
			free = append(free, g)
		}
	}
	flags := w.c.slotLoad(0, sFlags)
	w.c.slotStore(0, sFlags, flags|flagDevice)
	w.fence(free)
	w.c.slotStore(0, sFlags, flags)
	n := len(w.table)
	w.mu.Unlock()
	t0 := time.Now()
	_, err := w.grantWait(0, n, 5*time.Second)
	if took := time.Since(t0); !errors.Is(err, ErrPoolFull) || errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Errorf("a request of all %d grants, %d of them fenced for good: %v after %v; want ErrPoolFull at once", n, len(free), err, took)
	}
}
