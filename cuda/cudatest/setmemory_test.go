package cudatest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// fatalTB records the message of a Fatalf and ends its goroutine, as testing's does, without
// failing the test that runs it.
type fatalTB struct {
	testing.TB
	msg string
}

func (tb *fatalTB) Helper() {}

func (tb *fatalTB) Fatalf(format string, args ...any) {
	tb.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestSetMemoryNegative: SetMemory of a negative size fails the test saying it is no size.
// Before, it said "SetMemory(-1): below the 0 bytes device 0 uses now", a reason it was not.
func TestSetMemoryNegative(t *testing.T) {
	drv := fakecuda.Run(t)
	if drv == nil {
		return
	}
	tb := &fatalTB{TB: t}
	f := &Fake{t: tb, d: drv}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.SetMemory(-1)
	}()
	<-done
	if !strings.Contains(tb.msg, "SetMemory(-1): not a size") {
		t.Errorf("SetMemory(-1) failed the test with %q; want it to say -1 is not a size", tb.msg)
	}
}
