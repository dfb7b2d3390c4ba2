package streamq_test

import (
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestListsProperty drives Lists with random work, pushes, polls, completions and forgets on
// three streams of the fake (Hold on: queued work runs only when the test completes its
// stream), pushing through stale list handles too, and checks against a model of what each
// stream has run: an item comes back only after its stream ran the work queued before its push
// (never early), once; every item comes back at the first poll after its stream ran everything
// (never lost); a poll records no event for a stream with nothing queued, and a stream holds
// one event at most; a drain hands back every item; the totals count the items on the lists;
// and a stream's state is dropped at the second poll that finds it empty, or at once when it
// is forgotten. Every other seed
// runs with own points (OwnPoints): each item pushed behind an event the test records first;
// then the lists record no event at all, and never put an item's event back (the test does,
// as the item comes back).
func TestListsProperty(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const nstreams = 3
	ss, bufs, p, events := testStreams(t, dev, nstreams)
	type item struct {
		id   int
		s    int
		need int        // the work queued on s before the push: it must have run
		ev   cuda.Event // its own point, with own points
	}
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 11))
		ls := streamq.NewLists(p, func(it item) streamq.Tally {
			return streamq.Tally{Items: 1, Bytes: int64(it.id % 7), Weight: 2}
		}, 2)
		own := seed%2 == 1
		if own {
			ls.OwnPoints(func(it item) streamq.Event { return it.ev })
		}
		f.Hold(true)
		var queued, ran [nstreams]int // work queued on each stream, and run
		var polls [nstreams]int       // 1 + the polls since the stream last ran everything (0: it has work since)
		var stale [nstreams]*streamq.List[item]
		out := map[int]item{} // pushed, not back
		back := map[int]bool{}
		var items, bytes int64
		next := 0
		var done []item
		check := func(step int, got []item) {
			for _, it := range got {
				if back[it.id] {
					t.Fatalf("seed %d step %d: item %d back twice", seed, step, it.id)
				}
				if _, ok := out[it.id]; !ok {
					t.Fatalf("seed %d step %d: item %d back, never pushed", seed, step, it.id)
				}
				if ran[it.s] < it.need {
					t.Fatalf("seed %d step %d: item %d of stream %d back before the work queued ahead of its push ran (%d of %d)", seed, step, it.id, it.s, ran[it.s], it.need)
				}
				back[it.id] = true
				delete(out, it.id)
				if it.ev != 0 {
					events.Put(it.ev)
				}
				items, bytes = items-1, bytes-int64(it.id%7)
			}
		}
		poll := func(step int) {
			var err error
			if done, err = ls.Poll(done[:0]); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			check(step, done)
			idle := true
			for i := range nstreams {
				idle = idle && queued[i] == ran[i]
				if polls[i] > 0 {
					polls[i]++
				}
			}
			for _, it := range out {
				if polls[it.s] >= 2 {
					t.Fatalf("seed %d step %d: item %d of stream %d not back at a poll after its stream ran everything", seed, step, it.id, it.s)
				}
			}
			inUse := int(events.Created()) - events.Idle()
			if own {
				inUse -= len(out) // the items' own: the rest are the lists'
			}
			if inUse < 0 || inUse > nstreams || (idle || own) && inUse != 0 {
				t.Fatalf("seed %d step %d: %d events of the lists' in use (own points %v), every stream idle %v", seed, step, inUse, own, idle)
			}
		}
		for step := range 4000 {
			i := r.IntN(nstreams)
			switch op := r.IntN(20); {
			case op < 6: // work
				if err := dev.MemsetD8Async(bufs[i], byte(step), 4096, ss[i]); err != nil {
					t.Fatal(err)
				}
				queued[i]++
				polls[i] = 0
			case op < 11: // a push, sometimes of several, sometimes through a stale handle
				l := ls.Find(ss[i])
				if l == nil || r.IntN(4) == 0 {
					if stale[i] != nil && r.IntN(2) == 0 {
						l = stale[i]
					} else {
						l = ls.Get(ss[i])
					}
				}
				ls.Found(l)
				stale[i] = l
				vs := make([]item, 1+r.IntN(3))
				for k := range vs {
					vs[k] = item{id: next, s: i}
					if own { // the record is work on the stream, queued before the push
						vs[k].ev = ownPoint(t, dev, events, ss[i])
						queued[i]++
						polls[i] = 0
					}
					vs[k].need = queued[i]
					out[next] = vs[k]
					next++
					items, bytes = items+1, bytes+int64(vs[k].id%7)
				}
				if len(vs) == 1 {
					ls.Push(l, vs[0])
				} else {
					ls.PushMany(l, vs)
				}
			case op < 13: // the stream runs what it has
				f.CompleteStream(ss[i])
				ran[i] = queued[i]
				polls[i] = 1
			case op < 14 && r.IntN(4) == 0: // drain: the streams with items synchronized
				var has [nstreams]bool
				for _, it := range out {
					has[it.s] = true
				}
				var err error
				if done, err = ls.Drain(done[:0]); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				for k := range nstreams {
					if has[k] {
						ran[k], polls[k] = queued[k], 1
					}
				}
				check(step, done)
				for _, it := range out {
					t.Fatalf("seed %d step %d: item %d of stream %d not back after a drain", seed, step, it.id, it.s)
				}
			case op < 14: // forget it: synchronize, then release everything
				l := ls.Forget(ss[i])
				if err := dev.StreamSynchronize(ss[i]); err != nil {
					t.Fatal(err)
				}
				ran[i] = queued[i]
				if l != nil {
					done = ls.Release(l, done[:0])
					check(step, done)
				}
				if ls.Lookup(ss[i]) != nil || ls.Last() != nil && ls.Last().Stream() == ss[i] {
					t.Fatalf("seed %d step %d: stream %d forgotten, its state kept", seed, step, i)
				}
				for _, it := range out {
					if it.s == i {
						t.Fatalf("seed %d step %d: item %d of stream %d not back after its stream was forgotten", seed, step, it.id, i)
					}
				}
			default:
				poll(step)
			}
			if tot := ls.Totals(); tot.Items != items || tot.Bytes != bytes || tot.Weight != 2*items {
				t.Fatalf("seed %d step %d: totals %+v, %d items (%d bytes) out", seed, step, tot, items, bytes)
			}
			if err := ls.Verify(nil); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		f.Hold(false)
		for i := range ss {
			ran[i] = queued[i]
			if err := dev.StreamSynchronize(ss[i]); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 { // back, then empty twice: no state left
			poll(-1)
		}
		if len(out) != 0 || ls.Streams() != 0 || ls.Lookup(ss[0]) != nil {
			t.Fatalf("seed %d: %d items out, %d streams with state after the streams ran everything", seed, len(out), ls.Streams())
		}
	}
}

// ownPoint records an event of events on s, for an item's own point.
func ownPoint(t *testing.T, dev *cuda.Device, events *cuda.EventPool, s cuda.Stream) cuda.Event {
	t.Helper()
	ev, err := events.Get()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.EventRecord(ev, s); err != nil {
		t.Fatal(err)
	}
	return ev
}
