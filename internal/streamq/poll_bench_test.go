package streamq_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// BenchmarkFakePoll is the CPU cost of a poll of one stream's list, on the fake driver, with
// the capture gate held from its ask whether the stream captures to its last act: idle, a push
// and a poll that finds the stream idle (the ask and a query); busy, a poll of a list whose
// point the stream has not passed (the ask and the event's query); marked, a push and a poll
// that records a point for it (the ask, a query, and a record that asks before and after).
func BenchmarkFakePoll(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	dev := f.Open(b, 0)
	s, err := dev.StreamCreate(true)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := dev.MemAlloc(4096)
	if err != nil {
		b.Fatal(err)
	}
	p := streamq.PointsOf(dev)
	defer func() {
		f.Hold(false)
		for _, err := range []error{dev.StreamSynchronize(s), dev.MemFree(buf),
			dev.StreamDestroy(s), p.Close()} {
			if err != nil {
				b.Error(err)
			}
		}
	}()
	tally := func(int) streamq.Tally { return streamq.Tally{Items: 1} }
	var done []int
	b.Run("idle", func(b *testing.B) {
		ls := streamq.NewLists(p, tally, 2)
		for b.Loop() {
			ls.Push(ls.Get(s), 1)
			if done, err = ls.Poll(done[:0]); err != nil || len(done) != 1 {
				b.Fatal(done, err)
			}
		}
	})
	b.Run("busy", func(b *testing.B) {
		ls := streamq.NewLists(p, tally, 2)
		f.Hold(true)
		if err := dev.MemsetD8Async(buf, 1, 4096, s); err != nil {
			b.Fatal(err)
		}
		ls.Push(ls.Get(s), 1)
		if done, err = ls.Poll(done[:0]); err != nil || len(done) != 0 {
			b.Fatal(done, err)
		}
		for b.Loop() {
			if done, err = ls.Poll(done[:0]); err != nil || len(done) != 0 {
				b.Fatal(done, err)
			}
		}
		f.Hold(false)
		if _, err := ls.Drain(nil); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("marked", func(b *testing.B) {
		f.Hold(true)
		for b.Loop() {
			ls := streamq.NewLists(p, tally, 2)
			if err := dev.MemsetD8Async(buf, 1, 4096, s); err != nil {
				b.Fatal(err)
			}
			ls.Push(ls.Get(s), 1)
			if done, err = ls.Poll(done[:0]); err != nil || len(done) != 0 {
				b.Fatal(done, err)
			}
			b.StopTimer()
			f.Hold(false)
			if _, err := ls.Drain(nil); err != nil {
				b.Fatal(err)
			}
			f.Hold(true)
			b.StartTimer()
		}
	})
}
