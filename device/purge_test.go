package device

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// purgeTestDelay is the purge delay of the tests of the idle purge.
const purgeTestDelay = 2 * time.Millisecond

// granule is the fake's VMM granule, the device provider's commit unit (2 MiB, as measured).
const granule = 2 << 20

// burstIdle is the low-occupancy case of the idle purge: a burst of blocks of 8 B – 64 KiB
// on stream s, each with a memset queued on s and held (the fake runs it late, as a GPU
// may), all freed on s (a same-stream free, done in the heap at once) but keep of them. It
// returns the blocks kept and what the heap had committed after the burst.
func burstIdle(t *testing.T, f *fakecuda.Driver, h *Heap, s cuda.Stream, keep int) (live []cuda.DevicePtr, peak uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(38, 41))
	var ps []cuda.DevicePtr
	for range 512 {
		n := 8 + rng.IntN(64<<10-8+1)
		p := alloc(t, h, uintptr(n), s)
		ps = append(ps, p)
		must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0x38, n, pcuda.Stream(s)))
	}
	peak = h.Usage().Committed
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	for _, p := range ps[keep:] {
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	}
	if f.Pending() == 0 {
		t.Fatal("the memsets ran before the frees: the test holds nothing")
	}
	return ps[:keep], peak
}

// floor is the least a heap can hold for live blocks on 2 MiB granules: every granule a live
// block touches, committed whole.
func floor(h *Heap, live []cuda.DevicePtr) uint64 {
	gs := map[uintptr]bool{}
	for _, p := range live {
		n, _ := h.g.Size(p)
		for g := p / granule; g <= (p+n-1)/granule; g++ {
			gs[g] = true
		}
	}
	return uint64(len(gs)) * granule
}

// waitFor polls cond every purge delay until it holds or five seconds have passed (a loaded
// machine delays the purge's timer).
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(purgeTestDelay) {
		if cond() {
			return true
		}
	}
	return cond()
}

// purgeHeap is runHeap with the purge at purgeTestDelay, done early (the mutant) and ticked by
// the test alone (manual) as asked, and the fake holding the work queued from then on.
func purgeHeap(t *testing.T, early, manual bool) (*fakecuda.Driver, *cuda.Device, *Heap) {
	t.Helper()
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, PurgeDelay: purgeTestDelay})
	if f == nil {
		return nil, nil, nil
	}
	h.mu.Lock()
	h.purge.early, h.purge.manual = early, manual
	h.mu.Unlock()
	f.Hold(true)
	return f, dev, h
}

// TestFakeIdleFootprint: a stream heap that goes quiet after a burst gives back all but what
// its live blocks need (the 2 MiB granules they touch) a few purge delays later, with no call
// of the user's, and only once its stream has passed the frees: while the fake holds the
// memsets queued on the freed blocks, many ticks pass and nothing is given back; once it lets
// them run, the memory goes and the memsets ran on mapped memory (a granule unmapped under a
// queued memset makes the fake fault, sticky, as a GPU does).
func TestFakeIdleFootprint(t *testing.T) {
	f, dev, h := purgeHeap(t, false, false)
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	defer f.Complete()
	live, peak := burstIdle(t, f, h, s, 4)
	min := floor(h, live)
	if peak <= 2*min {
		t.Fatalf("the burst committed %d bytes for a floor of %d: the test shows nothing", peak, min)
	}
	ticks := h.Stats().PurgeTicks
	time.Sleep(10 * purgeTestDelay)
	waitFor(func() bool { return h.Stats().PurgeTicks >= ticks+5 })
	if st := h.Stats(); st.PurgeTicks < ticks+5 || st.Purges != 0 {
		t.Fatalf("while the stream's work is held: %d ticks, %d purges; want 5 or more, none", st.PurgeTicks-ticks, st.Purges)
	}
	if c := h.Usage().Committed; c < peak {
		t.Fatalf("while the stream's work is held, committed fell from %d to %d: memory given back before the stream passed its frees", peak, c)
	}
	f.Hold(false) // a query now runs the work queued and succeeds
	if !waitFor(func() bool { return h.Usage().Committed <= min }) {
		t.Fatalf("idle: %d bytes committed for %d live blocks, want %d (the granules they touch)", h.Usage().Committed, len(live), min)
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	if c := f.StickyError(); c != 0 {
		t.Fatalf("sticky error %d: work ran on memory given back", c)
	}
	must(t, "Trim", h.Trim())
	if c := h.Usage().Committed; c != min {
		t.Fatalf("after Trim: %d bytes committed, want %d", c, min)
	}
	freeAll(t, h, live)
}

// TestFakeIdlePurgeEarlyMutant proves TestFakeIdleFootprint's fake catches a purge that does
// not wait for the stream: with the mutant (trim a quiet heap at once), the granules go while
// the memsets are held, and the fake faults when they run.
func TestFakeIdlePurgeEarlyMutant(t *testing.T) {
	f, dev, h := purgeHeap(t, true, false)
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	defer f.Complete()
	live, peak := burstIdle(t, f, h, s, 4)
	if !waitFor(func() bool { return h.Usage().Committed < peak }) {
		t.Fatal("the mutant gave nothing back")
	}
	err := dev.StreamSynchronize(s)
	if r := cuda.Result(0); !errors.As(err, &r) || int(r) != fakecuda.ResultIllegalAddress {
		t.Fatalf("the memsets held on memory given back: %v, want a fault (CUDA_ERROR_ILLEGAL_ADDRESS)", err)
	}
	f.ClearStickyError()
	freeAll(t, h, live)
}

// TestFakeIdlePurgeDestroyedStream: a stream destroyed without ForgetStream, its memsets still
// held on blocks its heap has freed, cannot take a point (the driver refuses its handle): the
// purge answers it with one synchronize of the context, which runs the memsets, before the
// heap gives its memory back; nothing faults, and the heap idles at its floor.
func TestFakeIdlePurgeDestroyedStream(t *testing.T) {
	// The test ticks the purge itself: a tick of the timer between the burst and the destroy
	// would record a point in the stream, which the fake, holding its work, never passes.
	f, dev, h := purgeHeap(t, false, true)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer f.Complete()
	live, peak := burstIdle(t, f, h, s, 2)
	defer freeAll(t, h, live)
	must(t, "StreamDestroy", dev.StreamDestroy(s))
	h.purgeTick() // the heap busy since the last look
	h.purgeTick() // quiet: its stream refused, the context synchronized, the heap trimmed
	if st := h.Stats(); st.Purges != 1 || f.Pending() != 0 {
		t.Fatalf("two ticks after the destroy: %d purges, %d streams with work pending; want 1, none", st.Purges, f.Pending())
	}
	min := floor(h, live)
	if !waitFor(func() bool { return h.Usage().Committed <= min }) {
		t.Fatalf("a destroyed stream's heap holds %d bytes for a floor of %d (%d at the peak)", h.Usage().Committed, min, peak)
	}
	f.Complete() // whatever was left to run: on memory given back, it faults
	if f.StickyError() != 0 {
		t.Fatalf("sticky error %d: the destroyed stream's memsets ran on memory given back", f.StickyError())
	}
}

// purgeReuse is TestFakeIdlePurgeKeepsStreamOrder's run, with the purge early (the mutant)
// or not: stream a fills 64 blocks of 32 KiB with copies the fake holds, frees them on a and
// goes quiet for two ticks of the purge (the test's own); stream b then takes 64 such blocks
// and fills them; b's work runs, then a's. It returns the blocks of b's that a's late copies
// overwrote, and those of b's that lie where a's were; ran is false in the parent process
// (fakecuda.RunDevice), where the child reports.
func purgeReuse(t *testing.T, early bool) (overwritten, shared int, ran bool) {
	f, dev, h := purgeHeap(t, early, true)
	if f == nil {
		return 0, 0, false
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	defer f.Complete()
	const n, blocks = 32 << 10, 64
	was := map[cuda.DevicePtr]bool{}
	for range blocks {
		p := alloc(t, h, n, a)
		was[p] = true
		must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(p), pattern(n, 0xA0), pcuda.Stream(a)))
		must(t, "FreeAsync on a", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	}
	h.purgeTick() // a's heap busy since the last look
	h.purgeTick() // quiet: asked for (or, early, trimmed at once)
	var ps []cuda.DevicePtr
	want := pattern(n, 0xB0)
	for range blocks {
		p := alloc(t, h, n, b)
		ps = append(ps, p)
		if was[p] {
			shared++
		}
		must(t, "HtoDAsync on b", h.HtoDAsync(pcuda.DevicePtr(p), want, pcuda.Stream(b)))
	}
	f.CompleteStream(b)
	f.CompleteStream(a)
	buf := make([]byte, n)
	for _, p := range ps {
		must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(p)))
		if !bytes.Equal(buf, want) {
			overwritten++
		}
	}
	freeAll(t, h, ps)
	return overwritten, shared, true
}

// TestFakeIdlePurgeKeepsStreamOrder: a stream heap gone quiet with copies still queued on its
// freed blocks keeps them while its stream has not passed the frees, so another stream's
// blocks never lie where those copies land.
func TestFakeIdlePurgeKeepsStreamOrder(t *testing.T) {
	if over, shared, ran := purgeReuse(t, false); ran && (over != 0 || shared != 0) {
		t.Fatalf("%d of b's blocks overwritten by a's late copies, %d where a's were; want none", over, shared)
	}
}

// TestFakeIdlePurgeKeepsStreamOrderMutant proves the check: with a purge that does not wait
// for the stream, b takes a's memory and a's late copies overwrite b's blocks.
func TestFakeIdlePurgeKeepsStreamOrderMutant(t *testing.T) {
	if over, shared, ran := purgeReuse(t, true); ran && (over == 0 || shared == 0) {
		t.Fatalf("early purge: %d of b's blocks overwritten, %d where a's were; want some of both", over, shared)
	}
}

// TestFakeBusyHeapGivesSpares: a stream heap that stays busy (an allocation and a free every
// 100 µs) after a burst gives back the segments the burst left empty, once they have been
// empty for a tick and the stream has passed their frees: none while the fake holds the
// burst's memsets; then its spares go while it is busy (the empty pages still in segments
// wait), and, once it is quiet, all but the granules its live blocks touch.
func TestFakeBusyHeapGivesSpares(t *testing.T) {
	f, dev, h := purgeHeap(t, false, false)
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	defer f.Complete()
	live, peak := burstIdle(t, f, h, s, 4)
	defer freeAll(t, h, live)
	churn := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
			p := alloc(t, h, 64, s)
			must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		}
	}
	spares := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, n := h.streams[pcuda.Stream(s)].SpareMark()
		return n
	}
	churn(20 * purgeTestDelay)
	if c := h.Usage().Committed; c < peak || h.Stats().Purges != 0 {
		t.Fatalf("while the stream's work is held: committed %d (from %d), %d purges; want nothing given back", c, peak, h.Stats().Purges)
	}
	if spares() == 0 {
		t.Fatal("the burst left no empty segment: the test shows nothing")
	}
	f.Hold(false)
	if !waitFor(func() bool { churn(purgeTestDelay); return spares() == 0 && h.Usage().Committed < peak/2 }) {
		t.Fatalf("busy: %d spares kept, %d bytes committed (%d at the peak); want none, less than half", spares(), h.Usage().Committed, peak)
	}
	if !waitFor(func() bool { return h.Usage().Committed <= floor(h, live) }) {
		t.Fatalf("quiet: %d bytes committed, want %d", h.Usage().Committed, floor(h, live))
	}
}

// TestFakeCloseAfterIdlePurge: a user who used the legacy default stream, freed everything and
// synchronized closes the heap at the first try, however often the idle purge looked at its
// quiet heap meanwhile. No query finds the legacy stream idle (its work waits for every
// blocking stream's earlier work), so the purge asked for that heap with an event recorded
// there, which the fake holds (a GPU runs it a little later): Close found the legacy stream
// with the purge's event in flight and said ErrBusy (a retry succeeded on a GPU). The purge
// now leaves the heaps of the default streams alone (Trim gives them back), so it records
// nothing there; a blocking stream's quiet heap is still given back. Fails before the fix.
func TestFakeCloseAfterIdlePurge(t *testing.T) {
	f, dev, h := purgeHeap(t, false, true)
	if f == nil {
		return
	}
	defer f.Complete()
	b := newBlockingStream(t, dev, h)
	const n = 64 << 10
	for _, s := range []cuda.Stream{0, b} {
		p := alloc(t, h, n, s)
		must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0x5A, n, pcuda.Stream(s)))
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		h.mu.Lock()
		armed := h.purge.armed
		h.mu.Unlock()
		if armed != (s == b) {
			t.Fatalf("with a heap for stream %#x: the purge's timer armed %v, want %v (the legacy stream's heap is not watched)", s, armed, s == b)
		}
	}
	must(t, "synchronize the context", dev.Synchronize()) // the user's
	records := f.Stat(fakecuda.EventRecords)
	for range 4 { // busy since the last look, then quiet: asked for, and so on
		h.purgeTick()
	}
	if n := f.Stat(fakecuda.EventRecords) - records; n != 0 || f.Pending() != 0 {
		t.Errorf("the purge of quiet heaps on idle streams recorded %d events, left %d streams with work pending; want none", n, f.Pending())
	}
	if st := h.Stats(); st.Purges != 1 {
		t.Errorf("%d purges, want 1 (the blocking stream's heap)", st.Purges)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close, the first try: %v", err)
	}
}
