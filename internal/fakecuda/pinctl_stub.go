//go:build !cgo || !linux

package fakecuda

func (d *Driver) pinCtl(op int, a, b int64) int64 { return -1 }
