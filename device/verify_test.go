package device

import (
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"
)

// TestFakeVerify: the heap's bookkeeping agrees with its stream heaps through allocations,
// same-stream and deferred frees, and Verify catches each count that does not.
func TestFakeVerify(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, Quota: 8 << 20})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	f.Hold(true)
	defer f.Complete()
	p := alloc(t, h, 1000, a)
	q := alloc(t, h, 2<<20, a)
	r := alloc(t, h, 5000, b)
	must(t, "FreeAsync on its stream", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	must(t, "FreeAsync on another stream", h.FreeAsync(pcuda.DevicePtr(r), pcuda.Stream(a))) // deferred
	must(t, "Verify", h.Verify())
	for _, tc := range []struct {
		what   string
		break_ func()
		mend   func()
	}{
		{"an allocation counted twice", func() { h.st.Allocs++ }, func() { h.st.Allocs-- }},
		{"quota bytes counted twice", func() { h.used++ }, func() { h.used-- }},
		{"a deferred free of a free block", func() { h.deferred[pcuda.DevicePtr(p)] = true }, func() { delete(h.deferred, pcuda.DevicePtr(p)) }},
		{"a heap for a stream never seen", func() { h.streams[12345] = h.streams[pcuda.Stream(a)] }, func() { delete(h.streams, 12345) }},
	} {
		tc.break_()
		if err := h.Verify(); err == nil {
			t.Errorf("Verify missed %s", tc.what)
		}
		tc.mend()
	}
	must(t, "Verify", h.Verify())
	f.Complete()
	must(t, "Sync", h.Sync())
	must(t, "Verify", h.Verify())
	must(t, "Free", h.Free(pcuda.DevicePtr(q)))
}
