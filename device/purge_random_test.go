package device

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeIdlePurgeRandom runs long random sequences on three streams with the purge's timer
// at a 1 ms delay, so that it trims quiet heaps, and the arena decommits, in the middle of
// them: blocks of 8 B – 128 KiB (and now and then 1.5 MiB, a huge block) allocated, filled by
// a copy queued on their stream, freed on it; the fake holding or running the queued work in
// turn, pauses of a few purge delays, and checks of a block's bytes before its free. A purge
// that moved memory before its stream passed shows as a fault (memory decommitted under a
// queued copy: sticky, for every later synchronize) or as a block whose bytes another
// stream's late copy overwrote. 1,500 steps a seed by default, 20,000 with PINMALLOC_LONG.
func TestFakeIdlePurgeRandom(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 128 << 20, PurgeDelay: time.Millisecond})
	if f == nil {
		return
	}
	steps := 1_500
	if longRun() {
		steps = 20_000
	}
	ss := []cuda.Stream{newStream(t, dev, h), newStream(t, dev, h), newBlockingStream(t, dev, h)}
	defer f.Complete()
	type block struct {
		p    cuda.DevicePtr
		s    cuda.Stream
		want []byte
	}
	var live []block
	rng := rand.New(rand.NewPCG(38, 0xC))
	check := func(b block) {
		t.Helper()
		must(t, "StreamSynchronize", dev.StreamSynchronize(b.s))
		got := make([]byte, len(b.want))
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(b.p)))
		if !bytes.Equal(got, b.want) {
			t.Fatalf("block %#x of stream %#x: its bytes were overwritten by work of another owner", b.p, b.s)
		}
	}
	for k := range steps {
		switch r := rng.IntN(100); {
		case r < 45 || len(live) == 0:
			n := 8 + rng.IntN(128<<10)
			if rng.IntN(40) == 0 {
				n = 3 << 19
			}
			s := ss[rng.IntN(len(ss))]
			p := alloc(t, h, uintptr(n), s)
			want := pattern(n, byte(k))
			must(t, "HtoDAsync", h.HtoDAsync(pcuda.DevicePtr(p), want, pcuda.Stream(s)))
			live = append(live, block{p, s, want})
		case r < 90:
			i := rng.IntN(len(live))
			b := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			if rng.IntN(8) == 0 {
				check(b)
			}
			must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(b.p), pcuda.Stream(b.s)))
		case r < 95:
			f.Hold(rng.IntN(2) == 0)
		default:
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		if c := f.StickyError(); c != 0 {
			t.Fatalf("step %d: sticky error %d: work ran on memory given back", k, c)
		}
	}
	f.Hold(false)
	for _, b := range live {
		check(b)
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(b.p), pcuda.Stream(b.s)))
	}
	must(t, "Verify", h.Verify())
	if st := h.Stats(); st.Purges == 0 {
		t.Errorf("%d ticks and no purge: the test exercised nothing", st.PurgeTicks)
	}
	t.Logf("%d steps: %d stream heaps purged", steps, h.Stats().Purges)
}
