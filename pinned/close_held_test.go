package pinned_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeClosedHeldLastFree: in a closed CUDAHost pool whose frees are guarded (ZeroOnFree,
// RecordSites, a Trace or a Quota), a Free of the last live buffer while a Hold keeps it
// returns at once, as a Free of a held buffer does anywhere else: the last Release makes the
// free and releases the pool's memory. The guarded Free waited for the Hold as if it were a
// stream, for Close's whole wait (5 s; here an hour, so the Free below never returned before
// its Release).
func TestFakeClosedHeldLastFree(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	old := pinned.SetCloseWait(time.Hour)
	defer pinned.SetCloseWait(old)
	for _, c := range []struct {
		name string
		o    pinned.Options
	}{
		{"ZeroOnFree", pinned.Options{ZeroOnFree: true}},
		{"RecordSites", pinned.Options{RecordSites: true}},
		{"Trace", pinned.Options{Trace: &bytes.Buffer{}}},
		{"Quota", pinned.Options{Quota: 1 << 20}},
	} {
		p, b := closedWithOneLive(t, c.name, c.o)
		h, err := p.Hold(b)
		if err != nil {
			t.Fatalf("%s: Hold: %v", c.name, err)
		}
		freed := make(chan error, 1)
		go func() { freed <- p.Free(b) }()
		if !freedAtOnce(t, c.name+": Free of the held last buffer of a closed pool", freed, h) {
			continue
		}
		releaseFrees(t, c.name, p, h)
		if err := p.Close(); !errors.Is(err, pinned.ErrClosed) {
			t.Errorf("%s: Close after the release: %v", c.name, err)
		}
	}
}

// TestFakeClosedHeldBetweenFreeLooks: a Hold that takes the last live buffer of a closed
// CUDAHost pool between its guarded Free's look at the holds and the Free's claim defers the
// Free to the Hold's Release (TestFakeHoldBetweenGuardedFreeLooks), and the Free returns at once,
// as for a Hold before it: the Release releases the pool's memory. The Free went on to finish
// the close and waited for the Hold as for a stream, Close's whole wait (5 s; here an hour).
func TestFakeClosedHeldBetweenFreeLooks(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	old := pinned.SetCloseWait(time.Hour)
	defer pinned.SetCloseWait(old)
	for _, c := range []struct {
		name string
		o    pinned.Options
	}{
		{"ZeroOnFree", pinned.Options{ZeroOnFree: true}},
		{"RecordSites", pinned.Options{RecordSites: true}},
	} {
		p, b := closedWithOneLive(t, c.name, c.o)
		held := make(chan struct{})
		var h pinned.Hold
		var herr error
		restore := pinned.SetAfterHoldsLook(func() { h, herr = p.Hold(b); close(held) })
		freed := make(chan error, 1)
		go func() { freed <- p.Free(b) }()
		<-held
		if herr != nil {
			restore()
			t.Fatalf("%s: Hold between the Free's looks: %v", c.name, herr)
		}
		ok := freedAtOnce(t, c.name+": Free of the last buffer of a closed pool, held meanwhile,", freed, h)
		restore()
		if ok {
			releaseFrees(t, c.name, p, h)
		}
	}
}

// closedWithOneLive returns a CUDAHost pool of options o, closed with buffer b live
// (ErrLiveBlocks).
func closedWithOneLive(t *testing.T, name string, o pinned.Options) (*pinned.Pool, []byte) {
	t.Helper()
	o.Backend, o.Capacity = pinned.CUDAHost, 64<<20
	p, err := pinned.New(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("%s: Close with a buffer live: %v", name, err)
	}
	return p, b
}

// freedAtOnce reports whether the Free that answers on freed returned (nil) within 5 s; else
// it fails the test saying what, and ends the Free's wait with h's Release.
func freedAtOnce(t *testing.T, what string, freed <-chan error, h pinned.Hold) bool {
	t.Helper()
	select {
	case err := <-freed:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return true
	case <-time.After(5 * time.Second):
		t.Errorf("%s still waits after 5 s", what)
		_ = h.Release() // ends the wait
		<-freed
		return false
	}
}

// releaseFrees checks that p keeps its memory until h, the last hold of its last buffer, is
// released, and that the Release frees the buffer and releases the memory.
func releaseFrees(t *testing.T, name string, p *pinned.Pool, h pinned.Hold) {
	t.Helper()
	if st := p.Stats(); st.Reserved == 0 {
		t.Errorf("%s: the memory went before the last Release", name)
	}
	if err := h.Release(); err != nil {
		t.Errorf("%s: Release: %v", name, err)
	}
	if st := p.Stats(); st.Reserved != 0 || st.Live != 0 {
		t.Errorf("%s: after the last Release the pool holds %d buffers, %d bytes reserved", name, st.Live, st.Reserved)
	}
}
