package main

import (
	"errors"
	"testing"
	"unsafe"
)

// heapBacking hands out Go memory, counting what it holds, for the cache's tests.
type heapBacking struct {
	held map[uintptr][]byte
}

func (h *heapBacking) get(n int) (uintptr, error) {
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(&b[0]))
	h.held[p] = b
	return p, nil
}

func (h *heapBacking) put(p uintptr, n int) error {
	if b, ok := h.held[p]; !ok || len(b) != n {
		return errors.New("put of a block not handed out")
	}
	delete(h.held, p)
	return nil
}

// fakeEvents completes an event when told to.
type fakeEvents struct {
	next   uintptr
	doneAt map[uintptr]bool
}

func (e *fakeEvents) record(uintptr) (uintptr, error) {
	e.next++
	e.doneAt[e.next] = false
	return e.next, nil
}
func (e *fakeEvents) done(ev uintptr) (bool, error) { return e.doneAt[ev], nil }
func (e *fakeEvents) wait(ev uintptr) error         { e.doneAt[ev] = true; return nil }
func (e *fakeEvents) release(ev uintptr) error      { delete(e.doneAt, ev); return nil }

// TestTorchHost checks the PyTorch-style cache's policy: sizes round up to a power of two, a
// freed block is reused only for its own size (never split), a block used on a stream is
// reused only once the event recorded at its free has completed, and close gives every block
// back.
func TestTorchHost(t *testing.T) {
	for in, want := range map[int]int{1: 1, 3: 4, 4096: 4096, 4097: 8192, 5 << 20: 8 << 20} {
		if got := pow2(in); got != want {
			t.Errorf("pow2(%d) = %d, want %d", in, got, want)
		}
	}
	back := &heapBacking{held: map[uintptr][]byte{}}
	evs := &fakeEvents{doneAt: map[uintptr]bool{}}
	a := newTorchHost(back, evs)
	b, err := a.alloc(5 << 20)
	if err != nil || len(b) != 5<<20 {
		t.Fatalf("alloc: %d bytes, %v", len(b), err)
	}
	if held, _ := a.footprint(); held != 8<<20 {
		t.Errorf("reserved %d for 5 MiB, want 8 MiB", held)
	}
	first := &b[0]
	if err := a.free(b); err != nil {
		t.Fatal(err)
	}
	small, _ := a.alloc(1 << 20) // no split of the free 8 MiB block
	if held, _ := a.footprint(); held != 9<<20 || &small[0] == first {
		t.Errorf("a 1 MiB request took the free 8 MiB block (reserved %d)", held)
	}
	again, _ := a.alloc(6 << 20) // the same power of two: reused
	if &again[0] != first {
		t.Error("a 6 MiB request did not reuse the free 8 MiB block")
	}
	if err := a.recordStream(again, 7); err != nil {
		t.Fatal(err)
	}
	if err := a.free(again); err != nil {
		t.Fatal(err)
	}
	third, _ := a.alloc(8 << 20) // its event pending: a new block
	if &third[0] == first || len(evs.doneAt) != 1 {
		t.Errorf("reused a block whose stream had not passed (events %v)", evs.doneAt)
	}
	for ev := range evs.doneAt {
		evs.doneAt[ev] = true
	}
	fourth, _ := a.alloc(7 << 20)
	if &fourth[0] != first || len(evs.doneAt) != 0 {
		t.Errorf("the block did not come back once its event completed (events %v)", evs.doneAt)
	}
	if err := a.free(fourth); err != nil {
		t.Fatal(err)
	}
	if err := a.free(fourth); err == nil {
		t.Error("a double free was taken")
	}
	for _, x := range [][]byte{small, third} {
		if err := a.free(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.close(); err != nil || len(back.held) != 0 {
		t.Errorf("close: %v, %d blocks still held", err, len(back.held))
	}
	// Over locked memory, as the CPU suite runs it.
	l := newTorchHost(lockedBacking{}, nil)
	x, err := l.alloc(3000)
	if err != nil {
		t.Skipf("mmap+mlock: %v", err)
	}
	l.touch(x)
	if err := errors.Join(l.free(x), l.close()); err != nil {
		t.Fatal(err)
	}
}
