package streamq_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestOrder holds the fake's streams and checks that items finish only when their stream has
// passed their event, oldest first per stream, and that Drain finishes the rest.
func TestOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s1, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	events := cuda.NewEventPool(dev)
	var done []int
	q := streamq.New(dev, events, func(v int) error { done = append(done, v); return nil })
	f.Hold(true)
	for i := 0; i < 3; i++ {
		must(t, q.Push(s1, 10+i))
		must(t, q.Push(s2, 20+i))
	}
	must(t, q.Poll())
	if len(done) != 0 || q.Len() != 6 || q.Streams() != 2 {
		t.Fatalf("nothing complete: done %v, Len %d, Streams %d", done, q.Len(), q.Streams())
	}
	seen := map[cuda.Stream][]int{}
	q.Range(func(s cuda.Stream, v int) { seen[s] = append(seen[s], v) })
	if len(seen) != 2 || !slices.Equal(seen[s1], []int{10, 11, 12}) || !slices.Equal(seen[s2], []int{20, 21, 22}) {
		t.Fatalf("Range with nothing complete: %v", seen)
	}
	f.CompleteStream(s2)
	must(t, q.Poll())
	if !slices.Equal(done, []int{20, 21, 22}) || q.Len() != 3 {
		t.Fatalf("stream 2 complete: done %v, Len %d", done, q.Len())
	}
	must(t, q.Push(s2, 23))
	must(t, q.Drain())
	if !slices.Equal(done, []int{20, 21, 22, 10, 11, 12, 23}) && !slices.Equal(done, []int{20, 21, 22, 23, 10, 11, 12}) {
		t.Fatalf("after Drain: done %v", done)
	}
	if q.Len() != 0 || q.Streams() != 0 {
		t.Fatalf("after Drain: Len %d, Streams %d", q.Len(), q.Streams())
	}
	if events.Idle() != int(events.Created()) {
		t.Errorf("%d events idle of %d created: the queue kept some", events.Idle(), events.Created())
	}
	f.Hold(false)
	must(t, events.Close())
	must(t, dev.StreamDestroy(s1))
	must(t, dev.StreamDestroy(s2))
}

// TestDoneError checks that an item whose done fails leaves the queue, stops its stream's walk
// and is reported, and that the items behind it are finished by the next poll.
func TestDoneError(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	events := cuda.NewEventPool(dev)
	bad := errors.New("bad item")
	var done []int
	q := streamq.New(dev, events, func(v int) error {
		done = append(done, v)
		if v == 2 {
			return bad
		}
		return nil
	})
	for i := 1; i <= 3; i++ {
		must(t, q.Push(0, i))
	}
	if err := q.PollStream(0); !errors.Is(err, bad) {
		t.Fatalf("PollStream: %v, want the done error", err)
	}
	if !slices.Equal(done, []int{1, 2}) || q.Len() != 1 {
		t.Fatalf("done %v, Len %d after the error", done, q.Len())
	}
	must(t, q.Poll())
	if !slices.Equal(done, []int{1, 2, 3}) || q.Len() != 0 {
		t.Fatalf("done %v, Len %d after the next poll", done, q.Len())
	}
	if err := q.Push(12345, 4); err == nil {
		t.Error("Push on a stream the driver does not know succeeded")
	}
	if q.Len() != 0 || events.Idle() != int(events.Created()) {
		t.Errorf("a failed Push left Len %d, %d of %d events idle", q.Len(), events.Idle(), events.Created())
	}
	must(t, events.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
