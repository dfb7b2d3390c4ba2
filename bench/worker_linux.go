package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// protocolOutput returns the process's standard output for the worker's protocol alone, and
// sends whatever else writes to file descriptor 1 (Go code and C code alike) to the standard
// error.
func protocolOutput() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, err
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "protocol"), nil
}

// dieWithParent makes a child process get SIGKILL when the process that started it dies, so
// that a check killed at its command limit leaves no worker running.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
