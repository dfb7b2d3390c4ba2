//go:build !cgo || !linux

package nvml

import (
	"fmt"
	"runtime"
)

// Library stands for NVML's interface in builds without go-nvml (no cgo, or not linux).
type Library interface{}

// Default returns nil: there is no NVML library in this build.
func Default() Library { return nil }

var errStub = fmt.Errorf("%w: built without cgo or not on linux (%s/%s)", ErrUnavailable, runtime.GOOS, runtime.GOARCH)

// Discover returns an error matching ErrUnavailable.
func Discover(Library) ([]GPU, error) { return nil, errStub }

// MemoryUsed returns an error matching ErrUnavailable.
func MemoryUsed(Library, int) (uint64, error) { return 0, errStub }

// NUMANode returns an error matching ErrUnavailable.
func NUMANode(Library, string) (int, bool, error) { return -1, false, errStub }
