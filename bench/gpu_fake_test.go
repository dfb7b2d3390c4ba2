//go:build cgo && linux

package main

import (
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestGPUSuitesOnTheFakeSaySo: -gpu on pinmalloc's fake driver (PINMALLOC_LIBCUDA naming it)
// runs the CUDA cases there; the run says so, and its results' machine says the figures are
// no GPU's, so that the JSON's cuda-h2d and cuda-pair figures are not read as a GPU's.
func TestGPUSuitesOnTheFakeSaySo(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	defer func() { gpuTargets, gpuUnopened, gpuDriver = nil, nil, "" }()
	_, cs, closeGPU := openGPUSuites()
	defer closeGPU()
	if len(cs) == 0 {
		t.Fatalf("no GPU suite opened on the fake: %v", gpuUnopened)
	}
	if m := thisMachine(true, "0"); !strings.Contains(m.Driver, "fake") {
		t.Errorf("the results' machine does not say the CUDA figures were taken on the fake: %+v", m)
	}
}
