//go:build !linux

package main

// offMainThread runs f (the first thread's arena is glibc's: mainthread_linux.go).
func offMainThread(f func()) { f() }
