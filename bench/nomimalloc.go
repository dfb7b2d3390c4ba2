//go:build !cgo

package main

// newMimalloc reports mimalloc as skipped: its loops are C.
func newMimalloc() impl { return impl{name: "mimalloc", skip: "skipped (needs cgo: CGO_ENABLED=1)"} }
