package main

import (
	"fmt"
	"os"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// gpuSuite is a set of CUDA competitors and cases that a file built for a CUDA machine plugs
// in, by appending to gpuSuites from an init function:
//
//	func init() { gpuSuites = append(gpuSuites, cudaSuite{}) }
//
// Its impls (cuda-hostalloc, cuda-hostregister, cuda-mallocasync) fill the workload fields of
// impl they can run (pair at least) and take part in those cases like any allocator; its
// cases (H2D and D2H gbps, say) set benchCase.custom and report their own results. A suite may
// also run its competitors only in its own cases and return no impls (gpu_cuda.go does).
type gpuSuite interface {
	// name identifies the suite in messages.
	name() string
	// open finds the driver and a device; its error says why the suite cannot run.
	open() error
	// impls returns the suite's competitors.
	impls() []impl
	// cases returns the suite's own cases.
	cases() []benchCase
	// close releases what open took.
	close() error
	// targets checks the suite's targets against the run's results, building each with ratio.
	targets(rs []result) []target
}

// gpuTargets holds the targets method of every suite opened; evaluateTargets runs them.
var gpuTargets []func(rs []result) []target

// gpuSuites holds the suites compiled in. None is, on a build without CUDA support.
var gpuSuites []gpuSuite

// gpuUnopened says, for each suite openGPUSuites could not open, why.
var gpuUnopened []string

// gpuDriver, when the suites opened on pinmalloc's fake driver (cuda.LibraryEnv naming it),
// says so: the results' machine carries it, so that no CUDA figure of the run is read as a
// GPU's.
var gpuDriver string

// fakeGPUNote is gpuDriver on the fake.
const fakeGPUNote = "pinmalloc's fake CUDA driver: the CUDA cases' figures are this CPU's " +
	"and the fake's cost model, not a GPU's (their targets are N/A)"

// openGPUSuites opens every suite compiled in and returns their competitors and cases, and a
// function that closes them. Without a suite or a driver it says so and returns nothing.
func openGPUSuites() ([]impl, []benchCase, func()) {
	if len(gpuSuites) == 0 {
		fmt.Fprintln(os.Stderr, "bench: -gpu: no CUDA suite compiled in / no driver; continuing with the CPU cases")
		return nil, nil, func() {}
	}
	var impls []impl
	var cs []benchCase
	var opened []gpuSuite
	for _, s := range gpuSuites {
		if err := s.open(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -gpu: suite %s: %v; continuing without it\n", s.name(), err)
			gpuUnopened = append(gpuUnopened, s.name()+": "+err.Error())
			continue
		}
		opened = append(opened, s)
		gpuTargets = append(gpuTargets, s.targets)
		impls = append(impls, s.impls()...)
		cs = append(cs, s.cases()...)
	}
	if fake, _ := icuda.LoadedIsFake(); fake && len(opened) > 0 {
		gpuDriver = fakeGPUNote
		fmt.Fprintln(os.Stderr, "bench: -gpu: on "+fakeGPUNote)
	}
	return impls, cs, func() {
		for _, s := range opened {
			if err := s.close(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: -gpu: %s: close: %v\n", s.name(), err)
			}
		}
	}
}
