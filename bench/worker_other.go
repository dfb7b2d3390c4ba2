//go:build !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// protocolOutput returns the standard output: off linux the suites print nothing there.
func protocolOutput() (*os.File, error) { return os.Stdout, nil }

// dieWithParent is nothing off linux.
func dieWithParent() *syscall.SysProcAttr { return nil }

// startChild starts cmd.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
