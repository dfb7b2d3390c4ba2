package cudamem_test

import (
	"io"
	"testing"

	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeOpenHostCloseRetriesRelease: a Close of the provider OpenHost returns whose release
// of the device's primary context the driver refuses returns the refusal, and a later Close
// releases it. Before, the first Close gave up the provider's ownership of the device whatever
// the release did, and every later Close returned nil, the retain held for good.
func TestFakeOpenHostCloseRetriesRelease(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	retains := f.LiveObjects()["retains"]
	p, err := cudamem.OpenHost(0, cudamem.HostOptions{})
	must(t, "OpenHost", err)
	c, ok := p.(io.Closer)
	if !ok {
		t.Fatalf("%T has no Close", p)
	}
	f.FailAfter(fakecuda.CallPrimaryRelease, 0, fakecuda.ResultInvalidValue)
	if err := c.Close(); err == nil {
		t.Fatal("Close with the driver refusing the release: nil")
	}
	must(t, "Close after a refused one", c.Close())
	if got := f.LiveObjects()["retains"]; got != retains {
		t.Errorf("after a refused Close and another: %d retains of the device, want %d", got, retains)
	}
}
