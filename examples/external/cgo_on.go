//go:build cgo

package main

// cgoEnabled reports whether the program was built with cgo, without which no CUDA driver loads.
const cgoEnabled = true
