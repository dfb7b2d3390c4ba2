package pinned_test

import (
	"errors"
	"fmt"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// pendingCalls are the calls taking a buffer that must refuse one whose free is pending
// (ErrDoubleFree, as a second Free says), each run on b: its error.
func pendingCalls(p *pinned.Pool, s pubcuda.Stream) map[string]func(b []byte) error {
	return map[string]func([]byte) error{
		"WaitStreams":  p.WaitStreams,
		"RecordStream": func(b []byte) error { return p.RecordStream(b, s) },
		"Live":         p.Live,
		"Hold": func(b []byte) error {
			h, err := p.Hold(b)
			if err == nil {
				err = errors.Join(errors.New("held"), h.Release())
			}
			return err
		},
		"DevicePointer": func(b []byte) error { _, err := p.DevicePointer(b); return err },
	}
}

// refusedPending checks that every call of calls refuses b, whose free is pending, with
// ErrDoubleFree.
func refusedPending(t *testing.T, calls map[string]func([]byte) error, what string, b []byte) {
	t.Helper()
	for name, call := range calls {
		if err := call(b); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Errorf("%s of %s: %v, want ErrDoubleFree", name, what, err)
		}
	}
}

// TestFakePendingFreeRefused: WaitStreams, RecordStream and Live of a buffer whose free is
// pending in a pool with stream order (deferred behind a stream's copy, in the FreeAsync cache,
// or waiting for the Release of a hold) answered nil, as for a live buffer, where their docs
// promise ErrDoubleFree for a freed buffer (Live: Hold's errors); RecordStream of a held buffer
// freed even recorded the stream on it. Every call taking a buffer must refuse it.
func TestFakePendingFreeRefused(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	calls := pendingCalls(r.pool, s)
	for _, n := range holdSizes {
		d := r.devAlloc(n)
		r.f.Hold(true) // the copies stay queued: deferred buffers stay deferred

		a := r.alloc(n, 2)
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, s))
		ok(t, "Free", r.pool.Free(a))
		refusedPending(t, calls, fmt.Sprintf("a %d-byte buffer freed behind a copy", n), a)

		a = r.alloc(n, 3)
		ok(t, "FreeAsync", r.pool.FreeAsync(a, s))
		refusedPending(t, calls, fmt.Sprintf("a %d-byte buffer freed with FreeAsync", n), a)

		for _, recorded := range []bool{false, true} {
			a = r.alloc(n, 4)
			if recorded {
				ok(t, "RecordStream", r.pool.RecordStream(a, s))
			}
			h, err := r.pool.Hold(a)
			ok(t, "Hold", err)
			ok(t, "Free", r.pool.Free(a))
			what := fmt.Sprintf("a held %d-byte buffer (recorded %v) freed", n, recorded)
			refusedPending(t, calls, what, a)
			ok(t, "Release", h.Release())
		}

		r.f.Hold(false)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		ok(t, "Trim", r.pool.Trim())
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	r.finish()
}

// TestPendingFreeRefused: in a pool without stream order, WaitStreams, RecordStream and Live of
// a held buffer whose free waits for the hold's Release answered nil (WaitStreams checked no
// buffer at all, Go memory neither), where their docs promise ErrDoubleFree for a freed buffer
// and ErrNotOwned for memory of none.
func TestPendingFreeRefused(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	calls := pendingCalls(p, 0)
	delete(calls, "DevicePointer") // no device pointers in a Pageable pool
	for _, n := range holdSizes {
		a, err := p.Alloc(n)
		ok(t, "Alloc", err)
		ok(t, "WaitStreams", p.WaitStreams(a))
		h, err := p.Hold(a)
		ok(t, "Hold", err)
		ok(t, "Free", p.Free(a))
		refusedPending(t, calls, fmt.Sprintf("a held %d-byte buffer freed", n), a)
		ok(t, "Release", h.Release())
	}
	for name, call := range calls {
		if err := call(make([]byte, 64)); !errors.Is(err, pinned.ErrNotOwned) {
			t.Errorf("%s of Go memory: %v, want ErrNotOwned", name, err)
		}
	}
	ok(t, "Close", p.Close())
}
