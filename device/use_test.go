package device_test

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
)

// TestPackageUse runs the package documentation's use on the fake driver: a block for work on
// a stream, an upload and a download queued on it, and a stream-ordered free.
func TestPackageUse(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	h, err := device.New(dev, device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	src, dst := bytes.Repeat([]byte{7}, 1<<20), make([]byte, 1<<20)
	p, err := h.Alloc(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{h.HtoDAsync(p, src, s), h.DtoHAsync(dst, p, s), h.FreeAsync(p, s), dev.StreamSynchronize(s)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("the bytes that came back differ from those sent")
	}
}
