//go:build !cgo

package main

// newNullC reports the C loops' null allocator as skipped: its loops are C.
func newNullC() impl { return impl{name: "null-c", skip: "skipped (needs cgo: CGO_ENABLED=1)"} }
