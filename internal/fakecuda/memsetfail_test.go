package fakecuda

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFailAfterMemsetStreamCreate: FailAfter makes cuMemsetD8Async, cuMemsetD8 and
// cuStreamCreate fail, each once, after the calls skipped, changing nothing: a refused memset
// queues nothing (the memory keeps its bytes, no stream has work pending), a refused create
// makes no stream (the count of live streams unchanged), and the same call again succeeds.
func TestFailAfterMemsetStreamCreate(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	f.Hold(true)
	defer f.Hold(false)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	must(t, "MemsetD8", d.MemsetD8(p, 3, 4096))
	must(t, "StreamSynchronize", d.StreamSynchronize(0))
	b := make([]byte, 4096)
	read := func(what string, want byte) {
		t.Helper()
		must(t, "MemcpyDtoH", d.MemcpyDtoH(mem.Addr(b), p, 4096))
		if b[0] != want || b[4095] != want {
			t.Errorf("%s: memory reads %d, %d; want %d", what, b[0], b[4095], want)
		}
	}

	f.FailAfter(CallMemset, 1, ResultInvalidValue)
	must(t, "the MemsetD8Async skipped", d.MemsetD8Async(p, 4, 4096, s))
	wantCode(t, "MemsetD8Async", d.MemsetD8Async(p, 5, 4096, s), ResultInvalidValue)
	f.CompleteStream(s)
	read("after one memset passed and one refused", 4)
	wantNone := func(what string) {
		t.Helper()
		if n := f.Pending(); n != 0 {
			t.Errorf("%s: %d streams pending, want 0 (the memset not queued)", what, n)
		}
	}
	f.FailAfter(CallMemset, 0, ResultInvalidValue)
	wantCode(t, "MemsetD8Async", d.MemsetD8Async(p, 6, 4096, s), ResultInvalidValue)
	wantNone("after a refused cuMemsetD8Async")
	f.FailAfter(CallMemset, 0, ResultInvalidValue)
	wantCode(t, "MemsetD8", d.MemsetD8(p, 7, 4096), ResultInvalidValue)
	wantNone("after a refused cuMemsetD8")
	read("after the refused memsets", 4)
	must(t, "MemsetD8Async again", d.MemsetD8Async(p, 8, 4096, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	read("after the memset again", 8)

	streams := f.Stat(Streams)
	f.FailAfter(CallStreamCreate, 1, ResultOutOfMemory)
	s2, err := d.StreamCreate(true)
	must(t, "the StreamCreate skipped", err)
	s3, err := d.StreamCreate(false)
	wantCode(t, "StreamCreate", err, ResultOutOfMemory)
	if s3 != 0 {
		t.Errorf("a refused StreamCreate gave stream %#x, want none", s3)
	}
	if n := f.Stat(Streams); n != streams+1 {
		t.Errorf("%d streams after one create passed and one refused, want %d", n, streams+1)
	}
	s3, err = d.StreamCreate(false)
	must(t, "StreamCreate again", err)

	must(t, "MemFree", d.MemFree(p))
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "StreamDestroy", d.StreamDestroy(s2))
	must(t, "StreamDestroy", d.StreamDestroy(s3))
	if n := f.Stat(Streams); n != streams-1 {
		t.Errorf("%d streams after destroying them all, want %d", n, streams-1)
	}
}
