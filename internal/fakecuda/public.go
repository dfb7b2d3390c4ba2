package fakecuda

import (
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Public returns the public *cuda.Device (package github.com/pinmalloc/pinmalloc/cuda) around a
// device from RunDevice, Open or GPU, for tests that hand it to device.New, the arena providers
// or anything else of the public API. It is the same pointer every time for one device; closing
// either closes both.
func Public(d *icuda.Device) *cuda.Device {
	if d == nil {
		return nil
	}
	return icuda.Public(d).(*cuda.Device)
}
