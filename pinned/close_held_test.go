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
		o := c.o
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
			t.Fatalf("%s: Close with a buffer live: %v", c.name, err)
		}
		h, err := p.Hold(b)
		if err != nil {
			t.Fatalf("%s: Hold: %v", c.name, err)
		}
		freed := make(chan error, 1)
		go func() { freed <- p.Free(b) }()
		select {
		case err := <-freed:
			if err != nil {
				t.Errorf("%s: Free of the held buffer: %v", c.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: Free of the held last buffer of a closed pool still waits after 5 s", c.name)
			_ = h.Release() // ends the wait
			<-freed
			continue
		}
		if st := p.Stats(); st.Reserved == 0 {
			t.Errorf("%s: the memory went before the last Release", c.name)
		}
		if err := h.Release(); err != nil {
			t.Errorf("%s: Release: %v", c.name, err)
		}
		if st := p.Stats(); st.Reserved != 0 || st.Live != 0 {
			t.Errorf("%s: after the last Release the pool holds %d buffers, %d bytes reserved", c.name, st.Live, st.Reserved)
		}
		if err := p.Close(); !errors.Is(err, pinned.ErrClosed) {
			t.Errorf("%s: Close after the release: %v", c.name, err)
		}
	}
}
