//go:build !cgo || !linux

package cuda

const maxAccess = 16

func (*driver) memGetGranularityAt(Location, bool) (uintptr, error) { return 0, errStub }
func (*driver) memCreateAt(uintptr, Location) (MemHandle, error)    { return 0, errStub }
func (*driver) memSetAccessAt(DevicePtr, uintptr, []Location) error { return errStub }
