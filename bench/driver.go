package main

import (
	"fmt"
	"os"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// driverOrFake loads the CUDA driver for the suites that need one (-gpucheck, -uvm, -commit).
// Where none can be loaded, it says so on one line (prefix, the reason, then note: what the
// fake's figures are worth) and runs this program again, with the same arguments, on
// pinmalloc's fake driver (cudatest.ExecOnFake), and returns the child's exit status with
// rerun set: the caller exits with it. A driver named by cuda.LibraryEnv that does not load
// is an error (status 1, rerun set), never a silent fall-back to the fake.
func driverOrFake(prefix, note string) (code int, rerun bool) {
	err := icuda.Load()
	if err == nil {
		return 0, false
	}
	if lib := os.Getenv(cuda.LibraryEnv); lib != "" {
		fmt.Fprintf(os.Stderr, "%s: the driver at %s=%s: %v\n", prefix, cuda.LibraryEnv, lib, err)
		return 1, true
	}
	fmt.Fprintf(os.Stderr, "%s: no CUDA driver (%v): running on pinmalloc's fake driver; %s\n", prefix, err, note)
	code, err = cudatest.ExecOnFake()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prefix, err)
		return 1, true
	}
	return code, true
}
