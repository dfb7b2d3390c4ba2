//go:build !cgo || !linux

package fakecuda

import (
	"errors"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

const cgoEnabled = false

// handle is unused without cgo.
type handle struct{}

func open(string) (*Driver, error) { return nil, errNoCgo }

func (d *Driver) ctl(int, int64, int64) int64 { return 0 }

var errNoCgo = errors.New("fakecuda: built without cgo")

// MemCreate needs cgo.
func (d *Driver) MemCreate(*cuda.Device, uintptr, cuda.MemLocation, int) (cuda.MemHandle, error) {
	return 0, errNoCgo
}

// Granularity needs cgo.
func (d *Driver) Granularity(*cuda.Device, cuda.MemLocation) (uintptr, error) { return 0, errNoCgo }

// MemSetAccess needs cgo.
func (d *Driver) MemSetAccess(*cuda.Device, cuda.DevicePtr, uintptr, ...Access) error {
	return errNoCgo
}

// MemRelease needs cgo.
func (d *Driver) MemRelease(*cuda.Device, cuda.MemHandle) error { return errNoCgo }

// ForeignStreamCreate needs cgo.
func (d *Driver) ForeignStreamCreate(*cuda.Device) (cuda.Stream, error) { return 0, errNoCgo }

// ForeignStreamDestroy needs cgo.
func (d *Driver) ForeignStreamDestroy(*cuda.Device, cuda.Stream) error { return errNoCgo }
