//go:build !cgo || !linux

package cuda

import (
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc"
)

// Without cgo, or off linux, there is no driver: loadFrom always fails, so no Device is ever
// made and the raw calls below are unreachable; they exist so that the package compiles.

// driver is empty in this build.
type driver struct{}

// errStub is what every raw call returns.
var errStub = fmt.Errorf("%w: built without cgo or not on linux (%s/%s)", pinmalloc.ErrNoDriver, runtime.GOOS, runtime.GOARCH)

func loadFrom(path string) (*driver, error) {
	return nil, fmt.Errorf("%w: cannot load %s: built without cgo or not on linux (%s/%s)",
		pinmalloc.ErrNoDriver, path, runtime.GOOS, runtime.GOARCH)
}

func resultText(Result) (name, desc string, ok bool) { return "", "", false }

func (*driver) close()                                           {}
func (*driver) exports(string) bool                              { return false }
func (*driver) init() error                                      { return errStub }
func (*driver) driverVersion() (int, error)                      { return 0, errStub }
func (*driver) deviceCount() (int, error)                        { return 0, errStub }
func (*driver) deviceGet(int) (int32, error)                     { return 0, errStub }
func (*driver) deviceName(int32) (string, error)                 { return "", errStub }
func (*driver) deviceTotalMem(int32) (uintptr, error)            { return 0, errStub }
func (*driver) deviceAttribute(int32, int) (int, error)          { return 0, errStub }
func (*driver) primaryRetain(int32) (uintptr, error)             { return 0, errStub }
func (*driver) primaryRelease(int32) error                       { return errStub }
func (*driver) primaryActive(int32) (bool, error)                { return false, errStub }
func (*driver) doPush(uintptr, uintptr) error                    { return errStub }
func (*driver) doPop() error                                     { return errStub }
func (*driver) inDo(uintptr) bool                                { return false }
func (*driver) ctxSynchronize() error                            { return errStub }
func (*driver) streamQueryIn(uintptr, Stream, bool) error        { return errStub }
func (*driver) streamGetFlags(Stream) (uint32, error)            { return 0, errStub }
func (*driver) streamGetCtx(Stream) (uintptr, error)             { return 0, errStub }
func (*driver) eventQueryIn(uintptr, Event, bool) error          { return errStub }
func (*driver) eventRecordIn(uintptr, Event, Stream) error       { return errStub }
func (*driver) memGetInfo() (uintptr, uintptr, error)            { return 0, 0, errStub }
func (*driver) memAlloc(uintptr) (DevicePtr, error)              { return 0, errStub }
func (*driver) memFree(DevicePtr) error                          { return errStub }
func (*driver) memAllocAsync(uintptr, Stream) (DevicePtr, error) { return 0, errStub }
func (*driver) memFreeAsync(DevicePtr, Stream) error             { return errStub }
func (*driver) memAllocManaged(uintptr, uint32) (DevicePtr, error) {
	return 0, errStub
}
func (*driver) memHostAlloc(uintptr, uint32) (uintptr, error)             { return 0, errStub }
func (*driver) memFreeHost(uintptr) error                                 { return errStub }
func (*driver) memHostRegister(uintptr, uintptr, uint32) error            { return errStub }
func (*driver) memHostUnregister(uintptr) error                           { return errStub }
func (*driver) memHostGetDevicePointer(uintptr) (DevicePtr, error)        { return 0, errStub }
func (*driver) memsetD8(DevicePtr, byte, uintptr) error                   { return errStub }
func (*driver) memsetD8Async(DevicePtr, byte, uintptr, Stream) error      { return errStub }
func (*driver) memcpyHtoD(DevicePtr, uintptr, uintptr) error              { return errStub }
func (*driver) memcpyDtoH(uintptr, DevicePtr, uintptr) error              { return errStub }
func (*driver) memcpyDtoD(DevicePtr, DevicePtr, uintptr) error            { return errStub }
func (*driver) memcpyHtoDAsync(DevicePtr, uintptr, uintptr, Stream) error { return errStub }
func (*driver) memcpyDtoHAsync(uintptr, DevicePtr, uintptr, Stream) error { return errStub }
func (*driver) memcpyDtoDAsync(DevicePtr, DevicePtr, uintptr, Stream) error {
	return errStub
}
func (*driver) memGetGranularity(int, bool) (uintptr, error)          { return 0, errStub }
func (*driver) memAddressReserve(uintptr, uintptr) (DevicePtr, error) { return 0, errStub }
func (*driver) memAddressFree(DevicePtr, uintptr) error               { return errStub }
func (*driver) memCreate(uintptr, int) (MemHandle, error)             { return 0, errStub }
func (*driver) memRelease(MemHandle) error                            { return errStub }
func (*driver) memMap(DevicePtr, uintptr, MemHandle) error            { return errStub }
func (*driver) memUnmap(DevicePtr, uintptr) error                     { return errStub }
func (*driver) memSetAccess(DevicePtr, uintptr, int) error            { return errStub }
func (*driver) memPrefetchAsync(DevicePtr, uintptr, MemLocation, Stream) error {
	return errStub
}
func (*driver) memAdvise(DevicePtr, uintptr, int32, MemLocation) error { return errStub }
func (*driver) streamCreate(uint32) (Stream, error)                    { return 0, errStub }
func (*driver) streamDestroy(Stream) error                             { return errStub }
func (*driver) streamSynchronize(Stream) error                         { return errStub }
func (*driver) eventCreate(uint32) (Event, error)                      { return 0, errStub }
func (*driver) eventSynchronize(Event) error                           { return errStub }
func (*driver) eventDestroy(Event) error                               { return errStub }
func (*driver) eventElapsed(Event, Event) (float32, error)             { return 0, errStub }
