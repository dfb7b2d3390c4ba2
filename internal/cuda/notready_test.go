package cuda_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeNotReadyAllocatesNothing: a query of a stream or an event whose work is pending makes
// no heap allocation. The pools and heaps poll their deferred frees with these queries on their
// allocation path; the answer, CUDA_ERROR_NOT_READY (600), was boxed into an error afresh at
// every call (a Result above 255 does not fit the runtime's static small values).
func TestFakeNotReadyAllocatesNothing(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := f.Open(t, 0)
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	defer func() { need(t, "StreamDestroy", d.StreamDestroy(s)) }()
	ev, err := d.EventCreate(true)
	need(t, "EventCreate", err)
	defer func() { need(t, "EventDestroy", d.EventDestroy(ev)) }()
	p, err := d.MemAlloc(4096)
	need(t, "MemAlloc", err)
	defer func() { need(t, "MemFree", d.MemFree(p)) }()
	f.Hold(true)
	defer func() { f.Hold(false); f.Complete() }()
	need(t, "MemsetD8Async", d.MemsetD8Async(p, 1, 4096, s))
	need(t, "EventRecord", d.EventRecord(ev, s))
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Fatalf("StreamQuery of a held stream = %v, want ErrNotReady", err)
	}
	if err := d.EventQuery(ev); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Fatalf("EventQuery of an event behind held work = %v, want ErrNotReady", err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = d.StreamQuery(s), d.EventQuery(ev) }); n != 0 {
		t.Errorf("a not-ready StreamQuery and EventQuery allocate %v times", n)
	}
}

// need fails t at once with what and err when err is not nil.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
