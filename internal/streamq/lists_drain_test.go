package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestDrainRefusedStreamRecovered destroys a stream with work still queued after a poll gave its
// items a point: Drain's synchronize of it is refused, and the items must come back at the next
// Reclaim, by a synchronize of the context, although the point recorded before the destroy
// still answers "not ready" rather than an error (the poll alone never finds that list lost).
// Before Drain kept a refused list for Recover, the items stayed until the stream's point passed
// by chance: a full pinned pool waiting for its deferred buffers failed (1 run in 5 on 2 Ps).
func TestDrainRefusedStreamRecovered(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 1)
	gone, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	ls := streamq.NewLists(p, func(int) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }, 2)
	f.Hold(true)
	for i, s := range []streamq.Stream{gone, ss[0]} {
		if err := dev.MemsetD8Async(bufs[0], byte(i), 4096, s); err != nil {
			t.Fatal(err)
		}
		ls.Push(ls.Get(s), i)
	}
	done, err := ls.Poll(nil) // gives both lists a point: an event recorded on each stream
	if err != nil || len(done) != 0 {
		t.Fatalf("poll with the work held: %v back, error %v", done, err)
	}
	if err := dev.StreamDestroy(gone); err != nil { // its memset still queued
		t.Fatal(err)
	}
	done, err = ls.Drain(done)
	if err == nil {
		t.Fatal("Drain synchronized a destroyed stream")
	}
	if len(done) != 1 || done[0] != 1 {
		t.Fatalf("Drain gave back %v, want the live stream's item [1]", done)
	}
	if ls.Lost() != 1 {
		t.Fatalf("Drain kept %d lists for Recover, want the destroyed stream's", ls.Lost())
	}
	synced := false
	done, err = ls.Reclaim(done[:0], func() { synced = true })
	if err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if !synced || len(done) != 1 || done[0] != 0 {
		t.Fatalf("Reclaim after a refused drain gave back %v (context synchronized: %v), want [0]", done, synced)
	}
	if w := ls.Weight(); w != 0 || ls.Lost() != 0 {
		t.Fatalf("after Reclaim: weight %d, %d lists lost", w, ls.Lost())
	}
	f.Hold(false)
}
