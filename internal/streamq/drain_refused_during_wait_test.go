package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestDrainRefusalNotedDuringWait: a Drain reads a list's refusal (none yet), then waits for its
// stream; meanwhile the stream is destroyed with its memset still queued, a caller's own query
// finds the handle refused and notes it on the list (NoteRefused, as pinned's drainPend does,
// outside the reclaimer), and the driver gives the handle to a new, idle stream, which the
// Drain's synchronize then waits for. That synchronize says nothing of the destroyed stream's
// work: the item must wait for Recover's synchronize of the context. Before, the Drain handed it
// back with the destroyed stream's memset still queued.
func TestDrainRefusalNotedDuringWait(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	_, bufs, p, _ := testStreams(t, dev, 1)
	ls := countLists(p, 2)
	a, l := checkedStream(t, dev, ls, false)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	ls.Push(l, 1)
	if !f.PauseNextCall() {
		t.Fatal("PauseNextCall armed nothing")
	}
	type result struct {
		done []int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		done, err := ls.Drain(nil) // stops at its first driver call, before the synchronize
		res <- result{done, err}
	}()
	f.WaitPaused(t)
	if err := dev.StreamDestroy(a); err != nil { // its work still queued, as on a GPU
		f.ResumeCall()
		t.Fatal(err)
	}
	idle, err := ls.Idle(l)
	if err == nil {
		f.ResumeCall()
		t.Fatalf("Idle of the destroyed stream's list = %v, nil; want the driver's refusal", idle)
	}
	ls.NoteRefused(l, err)
	b, err := dev.StreamCreate(true)
	if err != nil {
		f.ResumeCall()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.StreamSynchronize(b); err != nil {
			t.Error(err)
		}
		if err := dev.StreamDestroy(b); err != nil {
			t.Error(err)
		}
	})
	f.ResumeCall()
	r := <-res
	if b != a {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", b, a)
	}
	if len(r.done) != 0 && f.Pending() > 0 {
		t.Fatalf("Drain gave back %v (error %v) after a synchronize of the reused handle, with "+
			"the destroyed stream's memset still queued", r.done, r.err)
	}
	f.Hold(false)
	done, err := ls.Reclaim(r.done, nil)
	if err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("reclaim after the drain: %v back, error %v; want [1]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
