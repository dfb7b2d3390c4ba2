//go:build !cgo || !linux

package fakecuda

import "github.com/pinmalloc/pinmalloc/internal/cuda"

// HandlePOSIXFD is CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, for MemCreate's handleTypes.
const HandlePOSIXFD = 1

// MemExport needs cgo.
func (d *Driver) MemExport(*cuda.Device, cuda.MemHandle, int) (int, error) { return -1, errNoCgo }

// MemImport needs cgo.
func (d *Driver) MemImport(*cuda.Device, int, int) (cuda.MemHandle, error) { return 0, errNoCgo }
