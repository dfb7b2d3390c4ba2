package nvml

import (
	"errors"
	"testing"
	"time"
)

// countLib is a Fake whose DeviceGetCount answers n, whatever its devices.
type countLib struct {
	*Fake
	n int
}

func (l countLib) DeviceGetCount() (int, Return) { return l.n, Success }

// TestDiscoverBadCount: a count NVML answers that no machine has (negative through a Library,
// 2^32-1 from the C shim's unsigned) is an error, not a panic of make or an allocation sized by
// it (4 Gi GPUs: hundreds of GiB).
func TestDiscoverBadCount(t *testing.T) {
	for _, n := range []int{-1, 1<<32 - 1} {
		f := &Fake{Devices: []FakeDevice{{Name: "GPU 0", UUID: "GPU-0", Memory: Memory{Total: 1 << 30}}}}
		gpus, err := Discover(countLib{f, n})
		if !errors.Is(err, ErrorUnknown) {
			t.Errorf("count %d: Discover = %v, %v, want ErrorUnknown", n, gpus, err)
		}
		if !f.Balanced() {
			t.Errorf("count %d: Init and Shutdown unbalanced", n)
		}
	}
}

// TestDiscoverBadMIGCount: a device answering 2^32-1 MIG slots is listed at once, not after
// billions of calls for the slots.
func TestDiscoverBadMIGCount(t *testing.T) {
	f := &Fake{Devices: []FakeDevice{{Name: "GPU 0", UUID: "GPU-0", Memory: Memory{Total: 1 << 30},
		MIG: true, MaxMIGDevices: 1<<32 - 1}}}
	done := make(chan error, 1)
	go func() {
		_, err := Discover(f)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Discover: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Discover of a device with 2^32-1 MIG slots did not return in 5 s")
	}
}
