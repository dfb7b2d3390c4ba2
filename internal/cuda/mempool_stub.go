//go:build !cgo || !linux

package cuda

func (*driver) memPoolCreate(MemPoolProps) (MemPool, error)                       { return 0, errStub }
func (*driver) memPoolDestroy(MemPool) error                                      { return errStub }
func (*driver) memPoolSetAttribute(MemPool, MemPoolAttr, uint64) error            { return errStub }
func (*driver) memPoolGetAttribute(MemPool, MemPoolAttr) (uint64, error)          { return 0, errStub }
func (*driver) memPoolSetAccess(MemPool, []MemLocation, bool) error               { return errStub }
func (*driver) memPoolTrimTo(MemPool, uintptr) error                              { return errStub }
func (*driver) memAllocFromPoolAsync(uintptr, MemPool, Stream) (DevicePtr, error) { return 0, errStub }
func (*driver) deviceDefaultMemPool(int32) (MemPool, error)                       { return 0, errStub }
