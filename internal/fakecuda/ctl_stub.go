//go:build !cgo || !linux

package fakecuda

import "errors"

const cgoEnabled = false

// handle is unused without cgo.
type handle struct{}

func open(string) (*Driver, error) { return nil, errors.New("fakecuda: built without cgo") }

func (d *Driver) ctl(int, int64, int64) int64 { return 0 }
