package cudatest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// TestNilFakeSaysWhy: a test that forgets to return when Device gives it nil, nil (the test
// process, which runs no fake) and uses the Fake is told what to do, not shown a nil
// dereference. Before, every method panicked with "invalid memory address or nil pointer
// dereference" inside package cudatest.
func TestNilFakeSaysWhy(t *testing.T) {
	for _, f := range []*cudatest.Fake{nil, {}} {
		for name, call := range map[string]func(){
			"Hold":           func() { f.Hold(true) },
			"Complete":       f.Complete,
			"CompleteStream": func() { f.CompleteStream(0) },
			"Pending":        func() { f.Pending() },
			"SetMemory":      func() { f.SetMemory(1 << 20) },
			"Used":           func() { f.Used() },
			"SetHostVMM":     func() { f.SetHostVMM(false) },
			"FailNext":       func() { f.FailNext(cudatest.MemCreate, cudatest.OutOfMemory) },
		} {
			got := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				call()
				return "no panic"
			}()
			if !strings.Contains(got, "if dev == nil { return }") {
				t.Errorf("%s of a nil or zero Fake: %s; want it to say the test must return", name, got)
			}
		}
	}
}
