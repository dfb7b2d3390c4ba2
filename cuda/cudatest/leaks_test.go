package cudatest

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestLeakNamesCallSite: what a test leaves open is named by the call that made it and the
// test's line, not dumped as counters; closing it clears the report.
func TestLeakNamesCallSite(t *testing.T) {
	dev, _ := Device(t)
	if dev == nil {
		return
	}
	in, err := icuda.Of(dev)
	if err != nil {
		t.Fatal(err)
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(1<<20, 0) // the heap's first memory
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.StreamCreate(cuda.StreamNonBlocking) // the stream's line
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20}) // its own Device
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	msg := leaks(in)
	t.Logf("the report:\n%s", msg)
	for _, want := range []string{
		`device\.Heap\.Alloc at cudatest/leaks_test\.go:30 \(`,
		`cuda\.Device\.StreamCreate at cudatest/leaks_test\.go:34 \(1 stream\)`,
		`pinned\.(New|Pool\.Alloc) at cudatest/leaks_test\.go:(38|42) \((1 host registration|.*VMM)`,
	} {
		if !regexp.MustCompile(want).MatchString(msg) {
			t.Errorf("leak report:\n%s\nwant a line matching %s", msg, want)
		}
	}
	if strings.Contains(msg, "DeviceAllocs") || strings.Contains(msg, "more made before") {
		t.Errorf("leak report dumps counters:\n%s", msg)
	}
	if err := errors.Join(pool.Free(b), pool.Close()); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamDestroy(s); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if msg := leaks(in); msg != "" {
		t.Errorf("after closing both, the leak report says:\n%s", msg)
	}
}

// TestSubtestNamesDevice: Device called in a subtest fails naming cudatest's function, not
// the internal fake's.
func TestSubtestNamesDevice(t *testing.T) {
	var msg string
	t.Run("sub", func(t *testing.T) {
		msg = subtestMessage(t.Name())
	})
	if !strings.Contains(msg, "cudatest.Device") || strings.Contains(msg, "fakecuda") {
		t.Errorf("subtest message %q: want it to name cudatest.Device, not fakecuda", msg)
	}
}
