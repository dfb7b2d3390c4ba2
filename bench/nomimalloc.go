//go:build !mimalloc || !cgo

package main

// newMimalloc reports mimalloc as skipped: it needs libmimalloc-dev, the mimalloc tag and cgo.
func newMimalloc() impl {
	skip := "skipped (build with -tags mimalloc)"
	if !cgoEnabled {
		skip = "skipped (build with -tags mimalloc and CGO_ENABLED=1)"
	}
	return impl{name: "mimalloc", skip: skip}
}
