package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestIdleOfLeftListRefused: a caller holds a list that has left the lists (pinned's FreeAsync
// cache, whose buffers stay apart from the list), and the stream's new list is lost on a refusal
// of the handle (destroyed with a memset queued) that a capture keeps Recover from answering;
// the driver then gives the handle to a new, idle stream. Idle of the list the caller holds must
// not say idle: the handle's answers say nothing of the destroyed stream's work. Before, Idle
// read the refusal of the list that left (none) and asked the new stream.
func TestIdleOfLeftListRefused(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	c := ss[0] // the stream a user captures
	ls := countLists(p, 1)
	if _, err := ls.Check(c); err != nil {
		t.Fatal(err)
	}
	a, l := checkedStream(t, dev, ls, true)
	f.Hold(true)
	if err := dev.MemsetD8Async(bufs[0], 1, 4096, a); err != nil {
		t.Fatal(err)
	}
	// The push follows to the stream's new list.
	ls.Push(l, 1)
	if err := dev.StreamDestroy(a); err != nil { // its work still queued, as on a GPU
		t.Fatal(err)
	}
	beginCapture(t, dev, c)
	if done, err := ls.Reclaim(nil, nil); err == nil || len(done) != 0 || !ls.Refused(a) {
		t.Fatalf("reclaim of the destroyed stream during a capture: %v back, error %v, refused %v; "+
			"want nothing back, an error, refused", done, err, ls.Refused(a))
	}
	reusedHandle(t, dev, a)
	if idle, err := ls.Idle(l); idle && f.Pending() > 0 {
		t.Fatalf("Idle of the list that left = %v, %v after the handle's reuse, with the destroyed "+
			"stream's memset still queued", idle, err)
	}
	endCapture(t, dev, c)
	f.Hold(false)
	done, err := ls.Reclaim(nil, nil)
	if err != nil || len(done) != 1 || done[0] != 1 {
		t.Fatalf("reclaim after the capture: %v back, error %v; want [1]", done, err)
	}
	if err := ls.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
