//go:build !cgo || !linux

package cuda

// The raw calls of launch_cgo.go, unreachable without a driver (see driver_stub.go).

func (*driver) streamWaitEvent(Stream, Event) error                  { return errStub }
func (*driver) streamCreateWithPriority(uint32, int) (Stream, error) { return 0, errStub }
func (*driver) streamPriorityRange() (int, int, error)               { return 0, 0, errStub }
func (*driver) memcpyAsync(uintptr, uintptr, uintptr, Stream) error  { return errStub }
func (*driver) memcpyBatchAsync([]uintptr, []uintptr, []uintptr, uint32, Stream) error {
	return errStub
}
func (*driver) memcpyBatchSymbol() error                           { return errStub }
func (*driver) moduleLoadData(string) (Module, error)              { return 0, errStub }
func (*driver) moduleGetFunction(Module, string) (Function, error) { return 0, errStub }
func (*driver) moduleUnload(Module) error                          { return errStub }
func (*driver) launchKernel(Function, Dim3, Dim3, uint32, Stream, []uint64) error {
	return errStub
}
