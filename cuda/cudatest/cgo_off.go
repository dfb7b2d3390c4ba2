//go:build !cgo

package cudatest

// cgoEnabled reports whether the test binary was built with cgo, without which no driver loads.
const cgoEnabled = false
