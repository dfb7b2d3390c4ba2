package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestNewSaysAttributeFailed: New on a device the driver will not answer the unified
// addressing query for (here, a closed device) says which package and what failed, once.
// Before, it returned the driver call's error as it was, without "uvm:" or what New asked.
func TestNewSaysAttributeFailed(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	dev, err := icuda.Open(0)
	must(t, err)
	must(t, dev.Close())
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20})
	if tr != nil {
		t.Fatal("New on a closed device returned a tier")
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if !errors.Is(err, pinmalloc.ErrClosed) || !strings.HasPrefix(msg, "uvm: ") ||
		!strings.Contains(msg, "unified addressing") || strings.Count(msg, "uvm:") != 1 {
		t.Errorf("New on a closed device: %v; want pinmalloc.ErrClosed, said once by uvm, "+
			"naming the unified addressing query", err)
	}
}
