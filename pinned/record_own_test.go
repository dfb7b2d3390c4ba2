package pinned_test

import (
	"errors"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeRecordStreamOwnPath: RecordStream of buffers of the caller's shard, from their start
// (the owner's path: recordOwn, the first record of each page making its tags first), then
// Free, on a busy stream: none is handed out again until the stream has passed, and then all
// are; a record of a buffer whose FreeAsync is pending, or of a freed one, is refused, and the
// buffer's free is not disturbed. 300 buffers of each size, 100 under the race detector (still
// pages of every class recorded and deferred; one goroutine's loop, which the non-race runs
// take at full length).
func TestFakeRecordStreamOwnPath(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	d := r.devAlloc(4 << 10)
	r.f.Hold(true)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 1, 4<<10, s)) // the stream is busy
	per := 300
	if pinned.RaceEnabled {
		per = 100
	}
	held := map[uintptr]bool{}
	for _, n := range []int{64, 4 << 10, 48 << 10} { // pages of several classes, fresh ones
		for range per {
			b := r.alloc(n, 3)
			ok(t, "RecordStream", r.pool.RecordStream(b, s))
			ok(t, "RecordStream again", r.pool.RecordStream(b[:n/2], s))
			ok(t, "Free", r.pool.Free(b))
			if err := r.pool.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
				t.Fatalf("Free twice of a recorded buffer: %v", err)
			}
			held[mem.Addr(b)] = true
		}
	}
	for _, n := range []int{64, 4 << 10, 48 << 10} {
		for range per {
			b := r.alloc(n, 0)
			if held[mem.Addr(b)] {
				t.Fatalf("a buffer of %d bytes recorded on a busy stream and freed was handed out again", n)
			}
			ok(t, "Free", r.pool.Free(b))
		}
	}
	if got := r.deferred(); got != uint64(len(held)) {
		t.Fatalf("%d deferred, want %d", got, len(held))
	}

	b := r.alloc(4<<10, 4)
	ok(t, "FreeAsync", r.pool.FreeAsync(b, s))
	if err := r.pool.RecordStream(b, s); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Fatalf("RecordStream of a buffer whose FreeAsync is pending: %v, want ErrDoubleFree", err)
	}
	c := r.alloc(4<<10, 5)
	ok(t, "Free", r.pool.Free(c))
	if err := r.pool.RecordStream(c, s); !errors.Is(err, pinned.ErrDoubleFree) && !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("RecordStream of a freed buffer: %v, want ErrDoubleFree or ErrNotOwned", err)
	}

	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if got := r.deferred(); got != 0 {
		t.Fatalf("%d deferred after the stream passed", got)
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
