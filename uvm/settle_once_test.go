package uvm_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// faultMover queues the first copy it is given, then the device faults, and it returns the
// driver's refusal of the next copy: a launch that fails with the context's sticky error right
// after the tier's waits were queued.
type faultMover struct {
	next  uvm.Mover
	fault func()
}

func (m *faultMover) Copy(jobs []uvm.CopyJob, s cuda.Stream) error {
	if m.fault == nil {
		return m.next.Copy(jobs, s)
	}
	if err := m.next.Copy(jobs[:1], s); err != nil {
		return err
	}
	m.fault()
	m.fault = nil
	return m.next.Copy(jobs[:1], s) // refused: the sticky error
}

// TestSettleCopiesSaysStickyErrorOnce: an eviction, or AcquireHost's copy to the host, whose
// launch failed with the context's sticky error waits for the copies it may have queued
// (settleCopies), and that wait fails with the same error. The error said the driver's error
// twice, once for the launch and once for the wait; now once, and still in the chain, with the
// host buffer held back said as before.
func TestSettleCopiesSaysStickyErrorOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	m := &faultMover{next: kernelMover(t, dev)}
	tr2 := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20, Mover: m})
	b, err := tr2.Alloc(abortBlock)
	must(t, err)
	s := stream(t, dev)
	p, err := tr2.Acquire(b, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(1, abortBlock))
	must(t, tr2.Release(b, s))
	must(t, dev.StreamSynchronize(uintptr(s)))

	for _, what := range []string{"Evict", "AcquireHost"} {
		m.fault = func() { f.Fault(t, dev) }
		var err error
		if what == "Evict" {
			err = tr2.Evict([]uvm.Handle{b})
		} else {
			_, err = tr2.AcquireHost(b, uvm.Read)
		}
		code, ok := cuda.ResultCode(err)
		if !ok || code != fakecuda.ResultIllegalAddress {
			t.Errorf("%s whose launch met the sticky error: %v; want the driver's error in the chain", what, err)
		}
		if n := strings.Count(fmt.Sprint(err), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
			t.Errorf("%s whose launch met the sticky error says the driver's error %d times: %v", what, n, err)
		}
		if !strings.Contains(fmt.Sprint(err), "holds back 1 host buffer") {
			t.Errorf("%s whose launch met the sticky error: %v; want it to say the host buffer is held back", what, err)
		}
		f.ClearStickyError()
		if err := tr2.Sync(); err != nil && !errors.Is(err, uvm.ErrHeldBack) {
			t.Fatalf("Sync: %v", err)
		}
	}
	must(t, tr2.Free(b))
}
