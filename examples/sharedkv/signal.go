package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// children are the processes the coordinator started. An interrupt kills them, so that the
// coordinator's calls to them fail at once and its run returns through its clean-up (the
// socket's folder removed) instead of dying on the signal and leaving it behind.
var children struct {
	mu          sync.Mutex
	procs       []*os.Process
	interrupted os.Signal
}

// track records a process the coordinator started. It returns false once an interrupt has
// come: the caller kills the process then.
func track(p *os.Process) bool {
	children.mu.Lock()
	defer children.mu.Unlock()
	if children.interrupted != nil {
		return false
	}
	children.procs = append(children.procs, p)
	return true
}

// stopOnInterrupt makes SIGINT, SIGTERM and SIGPIPE (output to a reader that is gone, as in
// sharedkv | head) kill the processes started (with SIGKILL) instead of this one. The returned
// function gives the signal that came, or nil.
func stopOnInterrupt() func() os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	go func() {
		sig := <-c
		children.mu.Lock()
		defer children.mu.Unlock()
		children.interrupted = sig
		for _, p := range children.procs {
			_ = p.Kill() // one already waited for says so; nothing to do
		}
	}()
	return func() os.Signal {
		children.mu.Lock()
		defer children.mu.Unlock()
		return children.interrupted
	}
}
