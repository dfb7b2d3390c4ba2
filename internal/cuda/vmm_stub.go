//go:build !cgo || !linux

package cuda

const maxAccess = 16

func (*driver) memGetGranularityAt(MemLocation, bool) (uintptr, error) { return 0, errStub }
func (*driver) memCreateAt(uintptr, MemLocation) (MemHandle, error)    { return 0, errStub }
func (*driver) memSetAccessAt(DevicePtr, uintptr, []MemLocation) error { return errStub }
