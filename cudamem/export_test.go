package cudamem

import "github.com/pinmalloc/pinmalloc/internal/nvml"

// SetNodeSources points DeviceNode at another sysfs and another NVML for a test, and returns
// what restores them.
func SetNodeSources(sysfs string, lib func() nvml.Library) (restore func()) {
	s, l := sysfsRoot, nvmlLib
	sysfsRoot, nvmlLib = sysfs, lib
	return func() { sysfsRoot, nvmlLib = s, l }
}
