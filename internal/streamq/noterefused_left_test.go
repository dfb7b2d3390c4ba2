package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestNoteRefusedOnLeftList: a caller holds a list that has left the lists since it found it
// (retired by polls that found it empty: pinned's FreeAsync cache keeps its buffers apart from
// the list), its stream is destroyed with a memset still queued, the caller's own query finds
// the handle refused and notes it on the list it holds (NoteRefused, as pinned's drainPend
// does), the driver gives the handle to a new, idle stream, and the caller pushes the destroyed
// stream's item on its list, which the push follows to the stream's new list. The refusal must
// follow too: the item waits for Recover's synchronize of the context. Before, it was noted on
// the list that had left, which no poll sees, and a poll asked the new stream and handed the
// item back with the destroyed stream's memset still queued.
func TestNoteRefusedOnLeftList(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	_, bufs, p, _ := testStreams(t, dev, 1)
	ls := countLists(p, 1)
	a, l := checkedStream(t, dev, ls, true)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamDestroy(a); err != nil { // its work still queued, as on a GPU
		t.Fatal(err)
	}
	idle, err := ls.Idle(l)
	if err == nil {
		t.Fatalf("Idle of the destroyed stream's list = %v, nil; want the driver's refusal", idle)
	}
	ls.NoteRefused(l, err)
	reusedHandle(t, dev, a)
	ls.Push(l, 1)                     // the destroyed stream's item: its memset is still queued
	done, err := ls.Reclaim(nil, nil) // Recover's synchronize of the context may run the memset
	if len(done) != 0 && f.Pending() > 0 {
		t.Fatalf("reclaim after the handle's reuse gave back %v (error %v), with the destroyed "+
			"stream's memset still queued", done, err)
	}
	f.Hold(false)
	done, err = ls.Reclaim(done, nil)
	if err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("reclaims once the memset ran: %v back, error %v; want [1]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
