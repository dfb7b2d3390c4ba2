package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestPackageUse runs the package documentation's use on the fake driver: a block acquired for
// writing on a stream, released, and freed.
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
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	h, err := tier.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tier.Acquire(h, s, uvm.Write)
	if err != nil || p == 0 {
		t.Fatalf("Acquire = %#x, %v", p, err)
	}
	for _, err := range []error{tier.Release(h, s), tier.Free(h), dev.StreamSynchronize(s)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := tier.Stats(); st.Allocs != 1 || st.Frees != 1 || st.Blocks != 0 {
		t.Errorf("Stats after the use: %v", st)
	}
}
