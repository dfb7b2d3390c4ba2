//go:build !cgo || !linux

package cuda

func (*driver) memCreateExportable(uintptr, MemLocation) (MemHandle, error) { return 0, errStub }
func (*driver) memExportFD(MemHandle) (int, error)                          { return -1, errStub }
func (*driver) memImportFD(int) (MemHandle, error)                          { return 0, errStub }
