package pinned_test

import (
	"errors"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeRecordStreamRacingFree: a RecordStream of a third stream on a buffer two streams use
// (its tag says several: the uses map) read the tag, then a Free of the buffer ran before the
// record took the uses shard's lock. The record trusted the tag it had read: it added its
// stream to the use the free left (a free deferred on the two streams), and said nil, though the
// buffer was handed out again once the two had passed, its stream still at work; or, the buffer
// back already, it wrote a use for a buffer no longer live, which the next owner of the address
// inherited (a use beside a buffer deferred on one stream: the invariant checks' panic). A
// record racing a free is the caller's bug, but it is ordered now: the record looks at the tag
// again under the lock, and finds the free, and is refused (ErrDoubleFree), changing nothing.
func TestFakeRecordStreamRacingFree(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	s1, s2, s3 := r.s, r.stream(), r.stream()
	d := r.devAlloc(4096)
	for _, backAlready := range []bool{false, true} {
		r.f.Hold(!backAlready) // the streams stay busy until completed
		for _, s := range []pubcuda.Stream{pubcuda.Stream(s1), pubcuda.Stream(s2), pubcuda.Stream(s3)} {
			ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 1, 4096, s))
		}
		x := r.alloc(4096, 1)
		ok(t, "RecordStream", r.pool.RecordStream(x, pubcuda.Stream(s1)))
		ok(t, "RecordStream", r.pool.RecordStream(x, pubcuda.Stream(s2)))
		once := false
		restore := pinned.SetRecordSharedLook(func() {
			if once {
				return
			}
			once = true
			ok(t, "Free", r.pool.Free(x))
			if backAlready {
				ok(t, "Trim", r.pool.Trim()) // the streams have passed: the buffer is back
			}
		})
		err := r.pool.RecordStream(x, pubcuda.Stream(s3))
		restore()
		if !errors.Is(err, pinned.ErrDoubleFree) && !errors.Is(err, pinned.ErrNotOwned) {
			t.Errorf("RecordStream racing the buffer's free (back already: %v) = %v; want ErrDoubleFree", backAlready, err)
		}
		r.f.CompleteStream(s1)
		r.f.CompleteStream(s2)
		ok(t, "Trim", r.pool.Trim())
		if err == nil && r.deferred() == 0 && r.f.Pending() != 0 {
			t.Errorf("the buffer went back with the stream recorded on it still at work (RecordStream said nil)")
		}
		if n := pinned.Uses(r.pool); n != 0 {
			t.Errorf("%d uses left once the buffer is back (back already: %v), want 0", n, backAlready)
		}
		r.f.Hold(false)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(s3))
		ok(t, "Trim", r.pool.Trim())
	}
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
