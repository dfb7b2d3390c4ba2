package uvm_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestRefusedHandleAcquireThenReused: block x written on stream s and released there, s
// destroyed without ForgetStream with the write still queued; an Acquire of block y on s,
// which must wait for y's release on another stream, finds s's handle refused by the driver.
// The driver then gives s's handle to a new stream n, and x is acquired on n: n must wait for
// s's release of x, as for another stream's. The tier kept s's release events standing for
// the handle after the driver had refused it (only a refused Release or Free let them go), so
// n took s's release for its own and read x before s's write had run.
func TestRefusedHandleAcquireThenReused(t *testing.T) {
	const size = 64 * kib
	f, dev, tr, s := reuseTier(t, size, 4)
	if f == nil {
		return
	}
	s2 := stream(t, dev)
	hs := filled(t, tr, 2, size)
	x, y := hs[0], hs[1]
	px, err := tr.Acquire(x, s, uvm.Write)
	must(t, err)
	_, err = tr.Acquire(y, s2, uvm.Write)
	must(t, err)
	must(t, tr.Sync()) // the blocks' bytes are on the device
	f.Hold(true)
	defer f.Hold(false)
	must(t, tr.Release(y, s2))                // an event on s2 that an Acquire of y on s waits for
	writeDev(t, dev, s, px, pattern(9, size)) // queued on s, not run
	must(t, tr.Release(x, s))
	must(t, dev.StreamDestroy(uintptr(s))) // without ForgetStream: the write stays queued
	if _, err := tr.Acquire(y, s, uvm.Read); err == nil {
		t.Fatal("Acquire on the destroyed stream succeeded: the test proves nothing")
	} else {
		t.Logf("Acquire on the destroyed stream: %v", err)
		if !errors.Is(err, uvm.ErrInvalidStream) {
			t.Errorf("Acquire on the destroyed stream: %v; want ErrInvalidStream", err)
		}
	}
	raw, err := dev.StreamCreate(true)
	must(t, err)
	n := cuda.Stream(raw)
	if n != s {
		_ = dev.StreamDestroy(raw)
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", n, s)
	}
	p, err := tr.Acquire(x, n, uvm.Read)
	must(t, err)
	if got := readDev(t, dev, n, p, size); !bytes.Equal(got, pattern(9, size)) {
		t.Errorf("a read on the stream that got the refused handle found the bytes before s's released write (byte 0 %#x, want %#x)", got[0], pattern(9, size)[0])
	}
	must(t, tr.Release(x, n))
	must(t, tr.ForgetStream(n))
	f.Hold(false)
	checkBlocks(t, tr, []uvm.Handle{x}, []byte{9}, size)
}

// TestRefusedStreamRefusesOtherUses: blocks x and z, z acquired on stream s and written there
// (held), s destroyed without ForgetStream. The tier finds s's handle refused through x: a
// Release of x (acquired on s too) while a capture holds a stream the tier knows, put off with
// ErrCapturing, or an Acquire of x on s, whose wait for x's release on another stream the
// driver refuses. The driver gives s's handle to a new stream n, and z, still acquired on the
// handle, is released there. Its move must wait for s's write: the tier had marked x's use
// alone as refused (or none, at the Acquire), so z's Release recorded its event on n, and the
// eviction that waited for that event alone copied z out before s's write had run.
func TestRefusedStreamRefusesOtherUses(t *testing.T) { testRefusedStreamRefusesOtherUses(t, "release") }

// TestRefusedStreamRefusesOtherUsesAtAcquire is TestRefusedStreamRefusesOtherUses with the
// refusal found by the Acquire of x.
func TestRefusedStreamRefusesOtherUsesAtAcquire(t *testing.T) {
	testRefusedStreamRefusesOtherUses(t, "acquire")
}

// TestRefusedStreamRefusesOtherUsesAtPrefetch is TestRefusedStreamRefusesOtherUses with the
// refusal found by a Prefetch of a block on the host on s, whose wait for its copy the driver
// refuses.
func TestRefusedStreamRefusesOtherUsesAtPrefetch(t *testing.T) {
	testRefusedStreamRefusesOtherUses(t, "prefetch")
}

// testRefusedStreamRefusesOtherUses is TestRefusedStreamRefusesOtherUses with the tier finding
// s refused by a Release of x ("release"), an Acquire of x ("acquire") or a Prefetch of x, on
// the host ("prefetch").
func testRefusedStreamRefusesOtherUses(t *testing.T, by string) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 3, size)
	x, z := hs[0], hs[1]
	capt := stream(t, dev)
	acquireAll(t, tr, capt, uvm.Read, hs[2:]) // a stream the tier knows
	if by == "acquire" {
		acquireAll(t, tr, capt, uvm.Read, hs[:1]) // x's release on capt: an Acquire on s waits for it
	}
	raw, err := dev.StreamCreate(true)
	must(t, err)
	s := cuda.Stream(raw)
	if by == "release" {
		_, err = tr.Acquire(x, s, uvm.Read)
		must(t, err)
	}
	pz, err := tr.Acquire(z, s, uvm.Write)
	must(t, err)
	f.Hold(true)
	defer f.Hold(false)
	writeDev(t, dev, s, pz, pattern(99, size)) // queued on s, run late
	must(t, dev.StreamDestroy(raw))            // without ForgetStream
	if by == "release" {
		beginCapture(t, dev, capt)
		var rerr error
		elsewhere(func() { rerr = tr.Release(x, s) })
		endCapture(t, dev, capt)
		if !errors.Is(rerr, pinmalloc.ErrCapturing) {
			t.Fatalf("Release on the destroyed stream, a known stream capturing: %v; want pinmalloc.ErrCapturing: the test proves nothing", rerr)
		}
	} else if by == "acquire" {
		if _, err := tr.Acquire(x, s, uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
			t.Errorf("Acquire on the destroyed stream: %v; want uvm.ErrInvalidStream", err)
		}
	} else if err := tr.Prefetch([]uvm.Handle{x}, s); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Prefetch on the destroyed stream: %v; want uvm.ErrInvalidStream", err)
	}
	raw, err = dev.StreamCreate(true)
	must(t, err)
	n := cuda.Stream(raw)
	if n != s {
		_ = dev.StreamDestroy(raw)
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", n, s)
	}
	t.Logf("Release of z on the reused handle: %v", tr.Release(z, n))
	must(t, tr.Evict([]uvm.Handle{z}))
	must(t, tr.Sync()) // the eviction's copy has run, and what it waits for
	f.Hold(false)
	checkBlocks(t, tr, []uvm.Handle{z}, []byte{99}, size)
	if by == "release" {
		if err := tr.Release(x, s); !errors.Is(err, uvm.ErrInvalidStream) {
			t.Errorf("Release of x on the destroyed stream once the capture ended: %v; want uvm.ErrInvalidStream", err)
		}
	}
	must(t, tr.ForgetStream(n))
	must(t, dev.StreamDestroy(raw))
	must(t, tr.Close())
}
