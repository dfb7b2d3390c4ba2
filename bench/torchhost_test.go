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

// fakeEvents completes an event when told to; it counts the events alive.
type fakeEvents struct {
	next     uintptr
	doneAt   map[uintptr]bool // recorded events: completed or not
	alive    int
	recorded int
}

func (e *fakeEvents) create() (uintptr, error) {
	e.next++
	e.alive++
	return e.next, nil
}
func (e *fakeEvents) record(ev, _ uintptr) error {
	e.doneAt[ev] = false
	e.recorded++
	return nil
}
func (e *fakeEvents) done(ev uintptr) (bool, error) { return e.doneAt[ev], nil }
func (e *fakeEvents) wait(ev uintptr) error         { e.doneAt[ev] = true; return nil }
func (e *fakeEvents) destroy(ev uintptr) error      { delete(e.doneAt, ev); e.alive--; return nil }

// complete completes every event recorded.
func (e *fakeEvents) complete() {
	for ev := range e.doneAt {
		e.doneAt[ev] = true
	}
}

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
	if &third[0] == first || evs.recorded != 1 {
		t.Errorf("reused a block whose stream had not passed (events %v)", evs.doneAt)
	}
	evs.complete()
	fourth, _ := a.alloc(7 << 20)
	if &fourth[0] != first || len(a.queue) != 0 {
		t.Errorf("the block did not come back once its event completed (queue %d)", len(a.queue))
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
	if err := a.close(); err != nil || len(back.held) != 0 || evs.alive != 0 {
		t.Errorf("close: %v, %d blocks still held, %d events alive", err, len(back.held), evs.alive)
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

// TestTorchHostEvents checks the cache's events as PyTorch's: pooled (a thousand frees on a
// stream, each followed by the GPU catching up, create one event, not a thousand), and processed
// oldest first up to the first not ready, so a block freed later, whose event has completed,
// stays out of reuse behind one still pending.
func TestTorchHostEvents(t *testing.T) {
	back := &heapBacking{held: map[uintptr][]byte{}}
	evs := &fakeEvents{doneAt: map[uintptr]bool{}}
	a := newTorchHost(back, evs)
	for range 1000 {
		b, err := a.alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(a.recordStream(b, 1), a.free(b)); err != nil {
			t.Fatal(err)
		}
		evs.complete()
	}
	if a.created != 1 || evs.alive != 1 || evs.recorded != 1000 {
		t.Errorf("1000 frees on a stream: %d events created, %d alive, %d recorded; want 1 created, reused", a.created, evs.alive, evs.recorded)
	}
	x, _ := a.alloc(1 << 20)
	y, _ := a.alloc(1 << 20)
	if err := errors.Join(a.recordStream(x, 1), a.free(x)); err != nil { // its event stays pending
		t.Fatal(err)
	}
	pending := a.queue[len(a.queue)-1].ev
	if err := errors.Join(a.recordStream(y, 2), a.free(y)); err != nil {
		t.Fatal(err)
	}
	evs.complete()
	evs.doneAt[pending] = false
	z, _ := a.alloc(1 << 20)
	if &z[0] == &y[0] || &z[0] == &x[0] || len(a.queue) != 2 {
		t.Errorf("took a block whose event completed behind one pending (queue %d)", len(a.queue))
	}
	evs.doneAt[pending] = true
	w, _ := a.alloc(1 << 20)
	v, _ := a.alloc(1 << 20)
	if len(a.queue) != 0 || (&w[0] != &x[0] && &w[0] != &y[0]) || (&v[0] != &x[0] && &v[0] != &y[0]) {
		t.Errorf("the queue did not drain once its oldest event completed (queue %d)", len(a.queue))
	}
	for _, b := range [][]byte{z, w, v} {
		if err := a.free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.close(); err != nil || evs.alive != 0 || len(back.held) != 0 {
		t.Errorf("close: %v, %d events alive, %d blocks held", err, evs.alive, len(back.held))
	}
}
