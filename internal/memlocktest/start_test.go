package memlocktest

import (
	"fmt"
	"io/fs"
	"os/exec"
	"syscall"
	"testing"
)

// TestCannotStart: a child the kernel refuses to start as nobody (fork/exec answers EPERM or
// EACCES, and there is no output) is a skip; a child that ran and failed is a failure, even when
// its output says "operation not permitted" (an mlock's EPERM, CUDA_ERROR_NOT_PERMITTED), which
// used to be taken for the refused start and skipped.
func TestCannotStart(t *testing.T) {
	refused := &fs.PathError{Op: "fork/exec", Path: "/tmp/x.test", Err: syscall.EPERM}
	denied := &fs.PathError{Op: "fork/exec", Path: "/tmp/x.test", Err: syscall.EACCES}
	ran := &exec.ExitError{}
	for _, c := range []struct {
		out  string
		err  error
		want bool
	}{
		{"", refused, true},
		{"", denied, true},
		{"", fmt.Errorf("wrapped: %w", refused), true},
		{"--- FAIL: TestX\n    mlock: operation not permitted\nFAIL\n", ran, false},
		{"cuda: CUDA_ERROR_NOT_PERMITTED: operation not permitted\n", ran, false},
		{"=== RUN TestX\nMEMLOCK-OK\n", nil, false},
	} {
		if got := cannotStart([]byte(c.out), c.err); got != c.want {
			t.Errorf("cannotStart(%q, %v) = %v, want %v", c.out, c.err, got, c.want)
		}
	}
}
