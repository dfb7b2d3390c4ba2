package device

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeModelRandom checks the heap against a model over long random sequences of Alloc,
// FreeAsync (on the block's stream or, ordered after it by an event, on another), Free, Sync,
// Trim, ForgetStream, Hold and Release, writes queued on a block's stream or made with HtoD, and
// CUDA graph captures, on six streams (three non-blocking, one blocking, the legacy stream under
// both its handles, 0 and 1), with the fake holding every queued copy until a synchronize runs it
// and a small capacity, so that reclaims and the idle purge run all along. Every block gets a
// pattern of its own, written on its stream, and each free is preceded by a copy of a tombstone
// pattern queued on the freeing stream: a block handed to a new owner before every stream that
// may use it has passed the free shows as the tombstone (or an older owner's pattern) in the new
// owner's bytes, read back at random checks and at the end. 1,500 steps a seed for 4 seeds by
// default, 20,000 steps for 16 seeds with PINMALLOC_LONG, 2 seeds under the race detector (the
// idle purge's goroutine still runs beside each seed's captures).
func TestFakeModelRandom(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	seeds, steps := 4, 1_500
	switch {
	case longRun():
		seeds, steps = 16, 20_000
	case raceEnabled:
		seeds = 2
	}
	runtime.LockOSThread() // the captures' thread
	defer runtime.UnlockOSThread()
	f.Hold(true)
	defer f.Complete()
	for seed := range uint64(seeds) {
		h, ss, err := modelHeap(dev, seed, []bool{true, true, true, false})
		if err == nil {
			w := &modelWorker{t: t, f: f, dev: dev, h: h, ss: append([]cuda.Stream{0, 1}, ss...),
				rng: rand.New(rand.NewPCG(seed, 0x90DE1)), forget: true}
			// Captures on every seed, the idle purge's too: its timer's goroutine asks whether a
			// stream captures, then queries the stream or records a point there, and a capture
			// begun between the two was invalidated by the query (about once in 20,000 steps)
			// or took the point into its graph. The capture gate (internal/cuda) makes the
			// begin wait for the ask and its act.
			w.capture = ss[:3]
			err = errors.Join(w.run(steps), modelEnd(f, dev, h, ss))
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// TestFakeModelRandomConcurrent is TestFakeModelRandom with three goroutines on one heap, each
// on two streams of its own (and the legacy stream, shared: none forgets it), and a fourth
// that trims and syncs the heap now and then. 3 seeds of 1,000 steps a goroutine, 8 of 10,000
// in the long form, 2 under the race detector (the goroutines' steps still interleave as
// many times a seed).
func TestFakeModelRandomConcurrent(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	seeds, steps := 3, 1_000
	switch {
	case longRun():
		seeds, steps = 8, 10_000
	case raceEnabled:
		seeds = 2
	}
	f.Hold(true)
	defer f.Complete()
	for seed := range uint64(seeds) {
		h, ss, err := modelHeap(dev, seed, []bool{true, false, true, true, true, false})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &modelWorker{t: t, f: f, dev: dev, h: h,
					ss:  []cuda.Stream{ss[2*g], ss[2*g+1], 0},
					rng: rand.New(rand.NewPCG(seed, uint64(g))), forget: true, shared: 0}
				errs[g] = w.run(steps)
			}()
		}
		stop := make(chan struct{})
		go func() {
			defer close(stop)
			rng := rand.New(rand.NewPCG(seed, 99))
			for k := 0; k < steps/10; k++ {
				var err error
				if rng.IntN(2) == 0 {
					err = h.Trim()
				} else {
					err = h.Sync()
				}
				if err != nil {
					errs[3] = err
					return
				}
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
		}()
		wg.Wait()
		<-stop
		if err := errors.Join(append(errs, modelEnd(f, dev, h, ss))...); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// modelHeap makes the heap of a seed, with a stream for each of nonBlocking.
func modelHeap(dev *cuda.Device, seed uint64, nonBlocking []bool) (*Heap, []cuda.Stream, error) {
	o := Options{Capacity: 8 << (seed % 3), PurgeDelay: -1, ZeroOnFree: seed%4 == 3}
	o.Capacity <<= 20
	if seed%3 == 2 {
		o.Quota = o.Capacity / 3
	}
	if seed%2 == 1 {
		o.PurgeDelay = time.Millisecond
	}
	h, err := New(public(dev), o)
	if err != nil {
		return nil, nil, err
	}
	var ss []cuda.Stream
	for _, nb := range nonBlocking {
		s, err := dev.StreamCreate(nb)
		if err != nil {
			return nil, nil, err
		}
		ss = append(ss, s)
	}
	return h, ss, nil
}

// modelEnd forgets and destroys the streams, and closes the heap, whose blocks are all freed.
func modelEnd(f *fakecuda.Driver, dev *cuda.Device, h *Heap, ss []cuda.Stream) error {
	f.Complete()
	errs := []error{h.Sync()}
	for _, s := range ss {
		errs = append(errs, h.ForgetStream(pcuda.Stream(s)), dev.StreamDestroy(s))
	}
	errs = append(errs, h.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("end: %w", err)
	}
	return nil
}

// modelBlock is a live block of the model.
type modelBlock struct {
	p     cuda.DevicePtr
	n     int
	alloc cuda.Stream // the stream it was allocated on
	cur   cuda.Stream // the stream that used it last: every use is ordered before its work
	want  []byte
	holds []Hold
	freed bool // a free waits for its holds
}

// modelWorker runs random steps on its streams ss, checking its blocks against its model.
type modelWorker struct {
	t      *testing.T
	f      *fakecuda.Driver
	dev    *cuda.Device
	h      *Heap
	ss     []cuda.Stream
	rng    *rand.Rand
	forget bool        // ForgetStream of its streams
	shared cuda.Stream // a stream other workers use too, not forgotten (0: the legacy one)
	ev     cuda.Event
	live   []*modelBlock
	step   int
	// capture: streams of ss that may capture a CUDA graph (non-blocking ones), and the one that
	// captures now, if capturing; the worker then leaves it alone, and the heap's calls must
	// leave the capture valid.
	capture   []cuda.Stream
	capturing bool
	captured  cuda.Stream
	captures  int // ended
}

// busy reports whether stream s is the one capturing.
func (w *modelWorker) busy(s cuda.Stream) bool { return w.capturing && s == w.captured }

// captureStep begins a capture on one of w.capture, or ends the one under way.
func (w *modelWorker) captureStep() error {
	if !w.capturing {
		c := w.capture[w.rng.IntN(len(w.capture))]
		if err := w.dev.StreamBeginCapture(c, cuda.CaptureGlobal); err != nil {
			return w.fail("StreamBeginCapture: %v", err)
		}
		w.capturing, w.captured = true, c
		return nil
	}
	w.capturing = false
	g, err := w.dev.StreamEndCapture(w.captured)
	if err != nil {
		return w.fail("StreamEndCapture: the heap invalidated the capture: %v", err)
	}
	if err := w.dev.GraphDestroy(g); err != nil {
		return w.fail("GraphDestroy: %v", err)
	}
	w.captures++
	return nil
}

// excuse drops from err what a capture under way explains: ErrCapturing, of calls that wait.
func (w *modelWorker) excuse(err error) error {
	if w.capturing && errors.Is(err, pcuda.ErrCapturing) {
		return nil
	}
	return err
}

func (w *modelWorker) fail(format string, a ...any) error {
	return fmt.Errorf("step %d: %s", w.step, fmt.Sprintf(format, a...))
}

// order makes t wait for the work queued on s so far.
func (w *modelWorker) order(s, t cuda.Stream) error {
	if s == t {
		return nil
	}
	return errors.Join(w.dev.EventRecord(w.ev, s), w.dev.StreamWaitEvent(t, w.ev))
}

// check reads block b back and compares it with the model.
func (w *modelWorker) check(b *modelBlock) error {
	if err := w.dev.StreamSynchronize(b.cur); err != nil {
		return w.fail("synchronize: %v", err)
	}
	got := make([]byte, b.n)
	if err := w.h.DtoH(got, pcuda.DevicePtr(b.p)); err != nil {
		return w.fail("DtoH: %v", err)
	}
	if !bytes.Equal(got, b.want) {
		i := firstDiff(got, b.want)
		return w.fail("block %#x of %d bytes (allocated on %#x, used on %#x): byte %d is %#x, "+
			"want %#x: another owner's work wrote it",
			b.p, b.n, b.alloc, b.cur, i, got[i], b.want[i])
	}
	return nil
}

// checkAll runs every late copy, then checks every block not freed.
func (w *modelWorker) checkAll() error {
	w.f.Complete()
	for _, b := range w.live {
		if b.freed || w.busy(b.cur) {
			continue // copies are refused: its free waits for its holds; or it captures
		}
		if err := w.check(b); err != nil {
			return err
		}
	}
	return nil
}

// write queues a new pattern on the block's stream, or, now and then when that is the stream it
// was allocated on, copies it there with HtoD (which comes after that stream's work).
func (w *modelWorker) write(b *modelBlock) error {
	b.want = pattern(b.n, byte(w.rng.Uint32()))
	if b.cur == b.alloc && w.rng.IntN(4) == 0 {
		if err := w.h.HtoD(pcuda.DevicePtr(b.p), b.want); err != nil {
			return w.fail("HtoD: %v", err)
		}
		return nil
	}
	if err := w.h.HtoDAsync(pcuda.DevicePtr(b.p), b.want, pcuda.Stream(b.cur)); err != nil {
		return w.fail("HtoDAsync: %v", err)
	}
	return nil
}

func (w *modelWorker) remove(b *modelBlock) {
	for i := range w.live {
		if w.live[i] == b {
			w.live[i] = w.live[len(w.live)-1]
			w.live = w.live[:len(w.live)-1]
			return
		}
	}
}

// free frees live[i]: on stream *s after a tombstone there, or with Free when s is nil.
func (w *modelWorker) free(i int, s *cuda.Stream) error {
	b := w.live[i]
	if len(b.holds) > 0 && b.freed {
		return nil
	}
	on := b.cur
	if s != nil {
		on = *s
	}
	if w.busy(b.cur) || w.busy(on) {
		return nil
	}
	if err := w.order(b.cur, on); err != nil {
		return w.fail("order: %v", err)
	}
	tomb := bytes.Repeat([]byte{0xDE}, b.n)
	if err := w.h.HtoDAsync(pcuda.DevicePtr(b.p), tomb, pcuda.Stream(on)); err != nil {
		return w.fail("tombstone: %v", err)
	}
	var err error
	if s == nil {
		if err := w.dev.StreamSynchronize(on); err != nil {
			return w.fail("synchronize before Free: %v", err)
		}
		err = w.h.Free(pcuda.DevicePtr(b.p))
	} else {
		err = w.h.FreeAsync(pcuda.DevicePtr(b.p), pcuda.Stream(on))
	}
	if err != nil && w.h.zeroOnFree && w.busy(b.alloc) && errors.Is(err, pcuda.ErrCapturing) {
		// The clear, queued on another stream than the block's, is ordered after the block's
		// stream, which captures: refused unless the heap knows that stream has passed its
		// frees (afterOwner). The block stays live, the tombstone its bytes.
		b.want, b.cur = tomb, on
		return nil
	}
	if err != nil {
		return w.fail("free of %#x on %v: %v", b.p, s, err)
	}
	if len(b.holds) > 0 {
		b.freed, b.cur = true, on
		return nil
	}
	w.remove(b)
	return nil
}

// freeOn frees live[i] on the stream live[j] was used on last.
func (w *modelWorker) freeOn(i, j int) error { return w.free(i, &w.live[j].cur) }

// run runs steps random steps, then frees every block of the worker's.
func (w *modelWorker) run(steps int) (err error) {
	if w.ev, err = w.dev.EventCreate(true); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.dev.EventDestroy(w.ev)) }()
	h, rng, ss := w.h, w.rng, w.ss
	for w.step = range steps {
		switch r := rng.IntN(100); {
		case r < 35 || len(w.live) == 0:
			n := 8 + rng.IntN(16<<10)
			switch k := rng.IntN(20); {
			case k == 0:
				n = 1<<20 + rng.IntN(2<<20) // huge: back to the arena at its free
			case k < 5:
				n = 8 + rng.IntN(256<<10)
			}
			s := ss[rng.IntN(len(ss))]
			if w.busy(s) {
				continue
			}
			p, err := h.Alloc(n, pcuda.Stream(s))
			if errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrQuota) { // live blocks fill it
				if len(w.live) == 0 {
					continue // other workers' do
				}
				if err := w.freeOn(rng.IntN(len(w.live)), rng.IntN(len(w.live))); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return w.fail("Alloc(%d) on %#x: %v", n, s, err)
			}
			b := &modelBlock{p: uintptr(p), n: n, alloc: s, cur: s}
			w.live = append(w.live, b)
			if err := w.write(b); err != nil {
				return err
			}
		case r < 45: // the block moves to another stream, ordered after its work so far
			b := w.live[rng.IntN(len(w.live))]
			t := ss[rng.IntN(len(ss))]
			if b.freed || w.busy(b.cur) || w.busy(t) {
				continue
			}
			if err := w.order(b.cur, t); err != nil {
				return w.fail("order: %v", err)
			}
			b.cur = t
			if err := w.write(b); err != nil {
				return err
			}
		case r < 60:
			if err := w.freeOn(rng.IntN(len(w.live)), rng.IntN(len(w.live))); err != nil {
				return err
			}
		case r < 70:
			s := ss[rng.IntN(len(ss))]
			if err := w.free(rng.IntN(len(w.live)), &s); err != nil {
				return err
			}
		case r < 73:
			if err := w.free(rng.IntN(len(w.live)), nil); err != nil {
				return err
			}
		case r < 77: // a hold, or the release of one
			b := w.live[rng.IntN(len(w.live))]
			if len(b.holds) > 0 && rng.IntN(2) == 0 {
				k := rng.IntN(len(b.holds))
				d := b.holds[k]
				b.holds = append(b.holds[:k], b.holds[k+1:]...)
				if err := d.Release(); err != nil {
					return w.fail("Release: %v", err)
				}
				if len(b.holds) == 0 && b.freed {
					w.remove(b)
				}
				continue
			}
			if b.freed {
				continue
			}
			d, err := h.Hold(pcuda.DevicePtr(b.p + uintptr(rng.IntN(b.n))))
			if err != nil {
				return w.fail("Hold: %v", err)
			}
			b.holds = append(b.holds, d)
		case r < 80:
			if err := w.excuse(h.Sync()); err != nil {
				return w.fail("Sync: %v", err)
			}
		case r < 83:
			if err := w.excuse(h.Trim()); err != nil {
				return w.fail("Trim: %v", err)
			}
		case r < 86: // ForgetStream of a stream, refused while blocks allocated there are live
			s := ss[rng.IntN(len(ss))]
			if !w.forget || s == w.shared {
				continue
			}
			mine := false
			for _, b := range w.live {
				mine = mine || b.alloc == s
			}
			// Without a live block of s's it may still find one freed on another stream that
			// has not passed the free.
			err := h.ForgetStream(pcuda.Stream(s))
			if w.busy(s) && (err == nil || errors.Is(err, pcuda.ErrCapturing)) {
				continue // nothing of s's to forget, or refused
			}
			if (mine || err != nil) && !errors.Is(err, heap.ErrLiveBlocks) {
				return w.fail("ForgetStream(%#x), live blocks %v: %v", s, mine, err)
			}
		case r < 90:
			b := w.live[rng.IntN(len(w.live))]
			if !b.freed && !w.busy(b.cur) {
				if err := w.check(b); err != nil {
					return err
				}
			}
		case r < 93:
			if err := w.checkAll(); err != nil {
				return err
			}
		case r < 97:
			if s := ss[rng.IntN(len(ss))]; !w.busy(s) {
				w.f.CompleteStream(s)
			}
		case r < 99:
			if len(w.capture) > 0 {
				if err := w.captureStep(); err != nil {
					return err
				}
			}
		default:
			_, err := h.Alloc(1<<62, pcuda.Stream(ss[rng.IntN(len(ss))]))
			if !errors.Is(err, heap.ErrTooLarge) && !errors.Is(err, ErrQuota) {
				return w.fail("Alloc(1<<62): %v, want heap.ErrTooLarge or ErrQuota", err)
			}
		}
		if c := w.f.StickyError(); c != 0 {
			return w.fail("sticky error %d: work ran on memory given back", c)
		}
		if err := h.Verify(); err != nil {
			return w.fail("Verify: %v", err)
		}
		if w.capturing {
			st, err := w.dev.StreamIsCapturing(w.captured)
			if err != nil || st != cuda.CaptureActive {
				return w.fail("the capture on %#x is no longer active (%v, %v)",
					w.captured, st, err)
			}
		}
	}
	w.step = steps
	if w.capturing {
		if err := w.captureStep(); err != nil {
			return err
		}
	}
	if err := w.checkAll(); err != nil {
		return err
	}
	for _, b := range w.live {
		for _, d := range b.holds {
			if err := d.Release(); err != nil {
				return w.fail("Release: %v", err)
			}
		}
		if !b.freed {
			if err := h.FreeAsync(pcuda.DevicePtr(b.p), pcuda.Stream(b.cur)); err != nil {
				return w.fail("FreeAsync: %v", err)
			}
		}
	}
	w.live = nil
	st := h.Stats()
	w.t.Logf("%d allocs, %d frees (%d deferred), %d reclaims, %d purges, %d captures", st.Allocs,
		st.Frees, st.DeferredFrees, st.Reclaims, st.Purges, w.captures)
	return nil
}
