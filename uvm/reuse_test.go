package uvm_test

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// A stream handle outlives its stream: the driver gives a destroyed stream's handle value to a
// stream created later (so does the fake, by default: fakecuda's ReuseStreamHandles), while the
// work of the destroyed one may still be queued. What the tier keeps per stream (a block's release
// event on each stream, the stream that last waited for them) must not pass to the new stream with
// the handle: the new stream is not ordered after the old one's work. Each test uses a stream s on
// the tier, writes through it (held: the fake runs it only when something waits for it), releases,
// ForgetStreams and destroys s, creates a stream n that gets s's handle, uses the tier on n, and
// checks every byte the tier moved.

// reuseTier is a tier of blocks of size bytes on the fake, which reuses stream handles, and a
// stream s whose handle the test passes on (reusedHandle); the stream that has it at the end is
// destroyed at cleanup.
func reuseTier(t *testing.T, size, blocks int) (*fakecuda.Driver, *icuda.Device, *uvm.Tier, cuda.Stream) {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil, nil, nil, 0
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: blocks * size})
	s, err := dev.StreamCreate(true)
	must(t, err)
	t.Cleanup(func() {
		if err := dev.StreamDestroy(s); err != nil { // the stream that has the handle now
			t.Errorf("StreamDestroy: %v", err)
		}
	})
	return f, dev, tr, cuda.Stream(s)
}

// reusedHandle ForgetStreams s on tr, destroys it, and creates a stream that gets its handle.
func reusedHandle(t *testing.T, dev *icuda.Device, tr *uvm.Tier, s cuda.Stream) cuda.Stream {
	t.Helper()
	must(t, tr.ForgetStream(s))
	must(t, dev.StreamDestroy(uintptr(s)))
	raw, err := dev.StreamCreate(true)
	must(t, err)
	if n := cuda.Stream(raw); n != s {
		_ = dev.StreamDestroy(raw)
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", n, s)
	}
	return cuda.Stream(raw)
}

// TestReusedHandleWaitsForOldRelease: a block written on s and released there, s forgotten and
// destroyed with the write still queued, then acquired on n, which has s's handle: n must wait
// for s's release, as for any other stream's. The tier took s's release event for n's own (a
// stream's earlier work needs no wait on that stream), so n read the block before s's write.
func TestReusedHandleWaitsForOldRelease(t *testing.T) {
	const size = 64 * kib
	f, dev, tr, s := reuseTier(t, size, 4)
	if f == nil {
		return
	}
	h := filled(t, tr, 1, size)[0]
	p, err := tr.Acquire(h, s, uvm.Write)
	must(t, err)
	must(t, tr.Sync()) // the block's bytes are on the device
	f.Hold(true)
	defer f.Hold(false)
	writeDev(t, dev, s, p, pattern(9, size)) // queued on s, not run
	must(t, tr.Release(h, s))
	readsWriteOnReusedHandle(t, f, dev, tr, h, s, 9, size, "s's")
}

// TestReusedHandleWaitsForOthersReleases: a block written on s2 and released there, acquired
// and released on s (which waits for s2's release), s forgotten and destroyed, the block then
// acquired on n, which has s's handle: n must wait for s2's release, which only s had waited
// for. The tier took n for the stream that had waited last, and made it wait for nothing.
func TestReusedHandleWaitsForOthersReleases(t *testing.T) {
	const size = 64 * kib
	f, dev, tr, s := reuseTier(t, size, 4)
	if f == nil {
		return
	}
	s2 := stream(t, dev)
	h := filled(t, tr, 1, size)[0]
	p, err := tr.Acquire(h, s2, uvm.Write)
	must(t, err)
	must(t, tr.Sync())
	f.Hold(true)
	defer f.Hold(false)
	writeDev(t, dev, s2, p, pattern(9, size)) // queued on s2, not run
	must(t, tr.Release(h, s2))
	_, err = tr.Acquire(h, s, uvm.Read) // s waits for s2's release
	must(t, err)
	must(t, tr.Release(h, s))
	readsWriteOnReusedHandle(t, f, dev, tr, h, s, 9, size, "s2's")
}

// readsWriteOnReusedHandle forgets and destroys s, acquires block h on the stream that gets s's
// handle, n, and checks that a read there finds the bytes of the released write (whose, in the
// error) of pattern v, which the fake holds queued: the read runs n and what it waits for. Then it
// releases h, lets the fake run and checks the block.
func readsWriteOnReusedHandle(t *testing.T, f *fakecuda.Driver, dev *icuda.Device, tr *uvm.Tier, h uvm.Handle, s cuda.Stream, v byte, size int, whose string) {
	t.Helper()
	n := reusedHandle(t, dev, tr, s)
	p, err := tr.Acquire(h, n, uvm.Read)
	must(t, err)
	if got := readDev(t, dev, n, p, size); !bytes.Equal(got, pattern(v, size)) {
		t.Errorf("a read on the stream that got s's handle found the bytes before %s released write (byte 0 %#x, want %#x)", whose, got[0], pattern(v, size)[0])
	}
	must(t, tr.Release(h, n))
	f.Hold(false)
	checkBlocks(t, tr, []uvm.Handle{h}, []byte{v}, size)
}

// TestReusedHandleEvictionWaitsForBoth: block a written on s and released there, s forgotten and
// destroyed with the write still queued, block b written on n (which has s's handle) and
// released there; both are evicted in one batch. The eviction's copies must wait for both
// releases. The batch kept one release event per stream handle, the newest (n's), and copied a
// out before s's write had run: its host copy, and every later read of it, had the old bytes.
func TestReusedHandleEvictionWaitsForBoth(t *testing.T) {
	const size = 64 * kib
	f, dev, tr, s := reuseTier(t, size, 4)
	if f == nil {
		return
	}
	hs := filled(t, tr, 2, size)
	pa, err := tr.Acquire(hs[0], s, uvm.Write)
	must(t, err)
	must(t, tr.Sync())
	f.Hold(true)
	defer f.Hold(false)
	writeDev(t, dev, s, pa, pattern(7, size)) // queued on s, not run
	must(t, tr.Release(hs[0], s))
	n := reusedHandle(t, dev, tr, s)
	pb, err := tr.Acquire(hs[1], n, uvm.Write)
	must(t, err)
	writeDev(t, dev, n, pb, pattern(8, size))
	must(t, tr.Release(hs[1], n))
	must(t, tr.Evict(hs))
	must(t, tr.Sync()) // the eviction's copies have run, and what they wait for
	f.Hold(false)
	checkBlocks(t, tr, hs, []byte{7, 8}, size)
}

// checkBlocks checks every byte of blocks hs on the host: block i holds pattern(seeds[i]).
func checkBlocks(t *testing.T, tr *uvm.Tier, hs []uvm.Handle, seeds []byte, size int) {
	t.Helper()
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if want := pattern(seeds[i], size); !bytes.Equal(b, want) {
			k := 0
			for k < size && b[k] == want[k] {
				k++
			}
			t.Errorf("block %d holds %#x at byte %d, want %#x", i, b[k], k, want[k])
		}
		must(t, tr.ReleaseHost(h))
	}
}

// TestForgottenIdleStreamsKeepNoReleases: a block resident for good, used by one short-lived
// stream after another, each synchronized, forgotten and destroyed (so the next one gets its
// handle): a stream forgotten once it has run its work leaves no release event behind, since
// they have all passed, and the next stream on the handle waits for none of them. Release
// events kept for every forgotten stream would pile up on a block that never moves.
func TestForgottenIdleStreamsKeepNoReleases(t *testing.T) {
	const size = 64 * kib
	f, dev, tr, s := reuseTier(t, size, 4)
	if f == nil {
		return
	}
	h := filled(t, tr, 1, size)[0]
	for i := range 32 {
		p, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		writeDev(t, dev, s, p, pattern(byte(i), size))
		must(t, tr.Release(h, s))
		must(t, dev.StreamSynchronize(uintptr(s)))
		waits := f.Stat(fakecuda.StreamWaits)
		s = reusedHandle(t, dev, tr, s)
		if n := f.Stat(fakecuda.StreamWaits) - waits; n != 0 {
			t.Fatalf("stream %d: forgetting an idle stream made %d stream waits", i, n)
		}
		if n, err := tr.ReleaseEvents(h); err != nil || n != 0 {
			t.Fatalf("after forgetting idle stream %d: the block keeps %d release events (%v), want 0", i, n, err)
		}
	}
	checkBlocks(t, tr, []uvm.Handle{h}, []byte{31}, size)
}

// evictedHolds evicts block h and checks that its host copy holds want, failing t with msg
// where it does not.
func evictedHolds(t *testing.T, tr *uvm.Tier, h uvm.Handle, want []byte, msg string) {
	t.Helper()
	must(t, tr.Evict([]uvm.Handle{h}))
	b, err := tr.AcquireHost(h, uvm.Read)
	must(t, err)
	if !bytes.Equal(b, want) {
		t.Error(msg)
	}
	must(t, tr.ReleaseHost(h))
}
