package fakecuda

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFailAfterStreamWait: FailAfter makes cuStreamWaitEvent and cuStreamSynchronize fail,
// each once, after the calls skipped, changing nothing: a refused wait queues no wait (the
// waiting stream does not wait for the event's work), a refused synchronize runs nothing (the
// stream's work stays queued), and the same call again succeeds.
func TestFailAfterStreamWait(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	f.Hold(true)
	defer f.Hold(false)
	s1, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	s2, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)

	must(t, "MemsetD8Async", d.MemsetD8Async(p, 7, 4096, s1))
	must(t, "EventRecord", d.EventRecord(ev, s1))
	waits := f.Stat(StreamWaits)
	f.FailAfter(CallStreamWait, 1, ResultInvalidValue)
	must(t, "the StreamWaitEvent skipped", d.StreamWaitEvent(s2, ev))
	wantCode(t, "StreamWaitEvent", d.StreamWaitEvent(s2, ev), ResultInvalidValue)
	if n := f.Stat(StreamWaits); n != waits+1 {
		t.Errorf("%d stream waits after one passed and one refused, want %d", n, waits+1)
	}
	f.CompleteStream(s1) // the wait that passed is done; the refused one would wait for nothing
	must(t, "MemsetD8Async after the event", d.MemsetD8Async(p, 8, 4096, s1))
	must(t, "EventRecord again", d.EventRecord(ev, s1))
	f.FailAfter(CallStreamWait, 0, ResultInvalidValue)
	wantCode(t, "StreamWaitEvent", d.StreamWaitEvent(s2, ev), ResultInvalidValue)
	f.CompleteStream(s2) // had the refused wait been queued, this would run s1's work too
	if n := f.Pending(); n != 1 {
		t.Errorf("%d streams pending after completing the stream whose wait was refused, want 1 "+
			"(the waited one, untouched)", n)
	}
	must(t, "StreamWaitEvent again", d.StreamWaitEvent(s2, ev))
	f.CompleteStream(s2)
	if n := f.Pending(); n != 0 {
		t.Errorf("%d streams pending after completing the stream that waits, want 0", n)
	}

	must(t, "MemsetD8Async", d.MemsetD8Async(p, 9, 4096, s1))
	f.FailAfter(CallStreamSync, 0, ResultInvalidValue)
	wantCode(t, "StreamSynchronize", d.StreamSynchronize(s1), ResultInvalidValue)
	if n := f.Pending(); n != 1 {
		t.Errorf("%d streams pending after a refused cuStreamSynchronize, want 1", n)
	}
	must(t, "StreamSynchronize again", d.StreamSynchronize(s1))
	if n := f.Pending(); n != 0 {
		t.Errorf("%d streams pending after cuStreamSynchronize, want 0", n)
	}
	b := make([]byte, 4096)
	must(t, "MemcpyDtoH", d.MemcpyDtoH(mem.Addr(b), p, 4096))
	if b[0] != 9 || b[4095] != 9 {
		t.Errorf("memory reads %d, %d after the synchronize; want 9, 9", b[0], b[4095])
	}

	must(t, "MemFree", d.MemFree(p))
	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "StreamDestroy", d.StreamDestroy(s1))
	must(t, "StreamDestroy", d.StreamDestroy(s2))
}
