//go:build !cgo

package main

// cgoEnabled reports whether the C competitors are compiled in.
const cgoEnabled = false

// newGlibc reports glibc as skipped: its loops are C.
func newGlibc() impl { return impl{name: "glibc", skip: "skipped (needs cgo: CGO_ENABLED=1)"} }
