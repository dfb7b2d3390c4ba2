package arena

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// SetNodeSources points DeviceNode at another sysfs and another NVML for a test, and returns
// what restores them.
func SetNodeSources(sysfs string, lib func() nvml.Library) (restore func()) {
	s, l := sysfsRoot, nvmlLib
	sysfsRoot, nvmlLib = sysfs, lib
	return func() { sysfsRoot, nvmlLib = s, l }
}

// HugeAdvice returns the transparent-huge-page advice of the mapping holding addr: "hg",
// "nh" or "".
func HugeAdvice(t *testing.T, addr uintptr) string { return hugeAdvice(t, addr) }
