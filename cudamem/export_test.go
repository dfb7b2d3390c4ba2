package cudamem

import "github.com/pinmalloc/pinmalloc/internal/nvml"

// SetNodeSources points DeviceNode at another sysfs and another NVML for a test, and returns
// what restores them.
func SetNodeSources(sysfs string, lib func() nvml.Library) (restore func()) {
	s, l := sysfsRoot, nvmlLib
	sysfsRoot, nvmlLib = sysfs, lib
	return func() { sysfsRoot, nvmlLib = s, l }
}

// SetReleaseUnmapHook makes f run in HostRegister.Release between the registrations' removal and
// the munmap, and returns what restores the hook.
func SetReleaseUnmapHook(f func()) (restore func()) {
	old := releaseUnmapHook
	releaseUnmapHook = f
	return func() { releaseUnmapHook = old }
}

// SetVMMReleaseWaitHook makes f run in a VMM provider's Release when, the region claimed, it
// waits for a Commit or Decommit of it in flight, and returns what restores the hook.
func SetVMMReleaseWaitHook(f func()) (restore func()) {
	old := vmmReleaseWaitHook
	vmmReleaseWaitHook = f
	return func() { vmmReleaseWaitHook = old }
}

// SetHostRegisterReleaseWaitHook makes f run in HostRegister.Release when, the region claimed,
// it waits for a call on it in flight, and returns what restores the hook.
func SetHostRegisterReleaseWaitHook(f func()) (restore func()) {
	old := hostRegisterReleaseWaitHook
	hostRegisterReleaseWaitHook = f
	return func() { hostRegisterReleaseWaitHook = old }
}
