//go:build !linux

package fakecuda

import "os/exec"

// runTied runs cmd with run: off Linux a child has no death signal to tie it to this process.
func runTied(cmd *exec.Cmd, run func() error) error { return run() }
