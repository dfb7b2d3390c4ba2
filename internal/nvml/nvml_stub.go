//go:build !cgo || !linux

package nvml

// DefaultPath is the library Default would load.
const DefaultPath = "libnvidia-ml.so.1"

// noLibrary stands for NVML in builds without cgo or off linux: Init answers
// ErrorLibraryNotFound, and nothing else is ever called.
type noLibrary struct{}

func (noLibrary) Init() Return                                      { return ErrorLibraryNotFound }
func (noLibrary) Shutdown() Return                                  { return ErrorUninitialized }
func (noLibrary) DeviceGetCount() (int, Return)                     { return 0, ErrorUninitialized }
func (noLibrary) DeviceGetHandleByIndex(int) (Device, Return)       { return nil, ErrorUninitialized }
func (noLibrary) DeviceGetHandleByPciBusId(string) (Device, Return) { return nil, ErrorUninitialized }

// Default returns a library that cannot be loaded: this build has no dlopen.
func Default() Library { return noLibrary{} }

// Open returns a library that cannot be loaded, whatever the path: this build has no dlopen.
func Open(string) Library { return noLibrary{} }
