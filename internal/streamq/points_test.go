package streamq_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestPointsProperty drives Points with random work, points, queries and completions on three
// streams of the fake (Hold on: queued work runs only when the test completes its stream) and
// checks the rule against a model of what each stream has run: a point reported passed, or a
// stream reported idle, has run everything queued before it (never early), and once a stream
// has run its work every point recorded in it before then is reported passed (never lost).
func TestPointsProperty(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const nstreams = 3
	ss, bufs, p, _ := testStreams(t, dev, nstreams)
	type point struct {
		ev      streamq.Event
		s       int
		pending bool // work was queued on s before it and had not run
		ran     bool // s has run everything queued before it since
	}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 7))
		f.Hold(true)
		var pending [nstreams]bool // work queued and not run
		var points []point
		for step := range 3000 {
			i := r.IntN(nstreams)
			switch op := r.IntN(10); {
			case op < 4: // work
				if err := dev.MemsetD8Async(bufs[i], byte(step), 4096, ss[i]); err != nil {
					t.Fatal(err)
				}
				pending[i] = true
			case op < 6: // a point
				ev, err := p.Mark(ss[i])
				if err != nil {
					t.Fatal(err)
				}
				points = append(points, point{ev: ev, s: i, pending: pending[i]})
			case op < 7: // the stream runs what it has
				f.CompleteStream(ss[i])
				pending[i] = false
				for k := range points {
					if points[k].s == i {
						points[k].ran = true
					}
				}
			case op < 8: // is it idle?
				idle, err := p.Idle(ss[i], true) // testStreams are non-blocking
				if err != nil {
					t.Fatal(err)
				}
				if idle && pending[i] {
					t.Fatalf("seed %d step %d: stream %d idle with work queued", seed, step, i)
				}
			default: // which points have passed?
				kept := points[:0]
				for _, pt := range points {
					passed, err := p.Passed(pt.ev)
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case passed && pt.pending && !pt.ran:
						t.Fatalf("seed %d step %d: a point of stream %d passed before the work queued ahead of it ran", seed, step, pt.s)
					case !passed && pt.ran:
						t.Fatalf("seed %d step %d: a point of stream %d not passed after its stream ran everything before it", seed, step, pt.s)
					case passed:
						p.Put(pt.ev)
					default:
						kept = append(kept, pt)
					}
				}
				points = kept
			}
		}
		f.Hold(false)
		for _, pt := range points {
			if err := dev.EventSynchronize(pt.ev); err != nil {
				t.Fatal(err)
			}
			p.Put(pt.ev)
		}
	}
}

// TestPointsRefuseOtherDevice: a stream of another device cannot take a point of this one
// (Check, Mark), and the event goes back to the pool.
func TestPointsRefuseOtherDevice(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev1 := f.Open(t, 1)
	s1, err := dev1.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev1.StreamDestroy(s1)
	events := cuda.NewEventPool(dev)
	p := streamq.NewPoints(dev, events)
	if err := p.Check(s1); err == nil {
		t.Fatal("Check of a stream of device 1 with the points of device 0")
	}
	if _, err := p.Mark(s1); err == nil {
		t.Fatal("Mark on a stream of device 1 with the points of device 0")
	}
	if events.Idle() != int(events.Created()) {
		t.Errorf("%d events idle of %d created", events.Idle(), events.Created())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRunningRefusedStreamNotIdle: a stream destroyed with a memset still queued (the driver
// refuses its handle from then on, and still runs the work) is not idle. Running, asked it with
// an idle stream, returns it with the driver's refusal (matching pinmalloc.ErrInvalidHandle),
// running false, and runs nothing; asked it with a busy stream, returns the busy one. Settle of
// it (a device heap's Close, for the stream of a heap) synchronizes the context, which runs
// the memset, before it says that nothing runs. Before, Running took the refusal for an idle
// stream, and Settle said nothing ran with the memset still queued.
func TestRunningRefusedStreamNotIdle(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ss, bufs, p, _ := testStreams(t, dev, 2)
	idle, busy := ss[0], ss[1]
	gone, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	f.Hold(true)
	defer f.Complete()
	if err := dev.MemsetD8Async(bufs[0], 0xAB, 4096, gone); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamDestroy(gone); err != nil { // its memset still queued
		t.Fatal(err)
	}
	s, running, err := p.Running([]streamq.Stream{idle, gone})
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) || running || s != gone {
		t.Fatalf("Running of an idle stream and a destroyed one with work queued: %#x, %v, %v; want %#x, false, the driver's refusal", s, running, err, gone)
	}
	if f.Pending() == 0 {
		t.Fatal("Running ran the destroyed stream's work (it waited)")
	}
	if err := dev.MemsetD8Async(bufs[1], 0xCD, 4096, busy); err != nil {
		t.Fatal(err)
	}
	if s, running, err = p.Running([]streamq.Stream{gone, busy}); err != nil || !running || s != busy {
		t.Fatalf("Running of a destroyed stream and a busy one: %#x, %v, %v; want %#x, true, nil", s, running, err, busy)
	}
	f.CompleteStream(busy)
	ls := streamq.NewLists[int](p, nil, 1)
	done, s, running, err := ls.Settle(nil, []streamq.Stream{idle, gone})
	if err != nil || running || len(done) != 0 {
		t.Fatalf("Settle of a destroyed stream: %v back, %#x, running %v, %v; want nothing, not running, nil", done, s, running, err)
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("Settle said nothing runs with the destroyed stream's memset still queued (%d streams with work pending)", n)
	}
}
