//go:build !cgo || !linux

package main

import (
	"fmt"
	"io"
	"os"
)

// footprintOnly is the -footprint mode, which needs the CUDA suites' cgo build.
func footprintOnly(*config) ([]benchCase, impl, func()) {
	fmt.Fprintln(os.Stderr, "bench: -footprint needs cgo on Linux (the CUDA suites)")
	os.Exit(2)
	return nil, impl{}, nil
}

func printFootprintCUDA(io.Writer, []result) {}
