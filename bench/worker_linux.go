package main

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
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
// that a check killed at its command limit leaves no worker, test binary or example running.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// spawner is the OS thread every child is started from (startChild).
var (
	spawnerOnce sync.Once
	spawner     = make(chan func())
)

// startChild starts cmd from one OS thread that never exits: a child's death signal
// (dieWithParent) follows the thread that forked it, not the process (golang/go#27505), and Go
// may end a thread while the process lives.
func startChild(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	spawner <- func() { done <- cmd.Start() }
	return <-done
}
