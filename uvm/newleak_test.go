package uvm_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// errNewFails is the failure injected into New after it made its device heap and host pool.
var errNewFails = errors.New("injected failure of New")

// checkNewLeaked checks the error of a New that failed and could not close what it made: it
// carries the failure and ErrLeaked, names what (the tier's host pool or device heap) and the
// bytes it keeps, and does not promise a later Close: New returns no tier to close.
func checkNewLeaked(t *testing.T, tr *uvm.Tier, err error, what string, bytes uint64) {
	t.Helper()
	if tr != nil {
		t.Fatalf("New that failed returned a tier")
	}
	if !errors.Is(err, errNewFails) || !errors.Is(err, uvm.ErrLeaked) {
		t.Fatalf("New that failed and could not close its %s: %v; want the failure and ErrLeaked",
			what, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, what) || !strings.Contains(msg, strconv.FormatUint(bytes, 10)+" bytes") {
		t.Errorf("New's error does not name the %s and the %d bytes it keeps: %v", what, bytes, err)
	}
	if strings.Contains(msg, "a later Close") {
		t.Errorf("New's error promises a later Close, but New returns no tier: %v", err)
	}
}

// TestNewSaysPoolItCouldNotClose: when New fails after making the tier's host pool, and the
// driver refuses to give back the pool's memory (committed ahead by HostPrecommit), New's error
// says so with ErrLeaked, naming the host pool and its bytes. Before, the error said "a later
// Close tries again", where New returns no tier to close: the memory was lost without a word
// a program could test.
func TestNewSaysPoolItCouldNotClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const precommit = 2 << 20
	var pool *pinned.Pool
	uvm.FailNew(errNewFails, func(_ *device.Heap, p *pinned.Pool) {
		pool = p
		if err := p.WaitPrecommit(); err != nil {
			t.Errorf("precommit: %v", err)
		}
		f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
		f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	})
	o := uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20, HostPrecommit: precommit}
	tr, err := uvm.New(public(dev), o)
	if pool == nil {
		t.Fatalf("New did not reach the injected failure: %v", err)
	}
	kept := pool.Usage().Committed
	if kept < precommit {
		t.Fatalf("the pool New could not close keeps %d bytes; want the %d precommitted", kept, precommit)
	}
	checkNewLeaked(t, tr, err, "host pool", kept)
	if err := pool.Close(); err != nil { // what no program can do: the test held the pool
		t.Errorf("closing the pool New left again: %v", err)
	}
}

// TestNewSaysHeapItCouldNotClose: the same for the tier's own device heap, holding VRAM.
func TestNewSaysHeapItCouldNotClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var heap *device.Heap
	uvm.FailNew(errNewFails, func(h *device.Heap, _ *pinned.Pool) {
		heap = h
		p, err := h.Alloc(64<<10, 0) // the heap commits VRAM, and keeps it (never purged)
		if err == nil {
			err = h.Free(p)
		}
		if err != nil {
			t.Errorf("the heap's Alloc and Free: %v", err)
		}
		f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
		f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	})
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	if heap == nil {
		t.Fatalf("New did not reach the injected failure: %v", err)
	}
	kept := heap.Stats().Arena.Committed
	if kept == 0 {
		t.Fatalf("the heap New could not close keeps no memory: %+v", heap.Stats().Arena)
	}
	checkNewLeaked(t, tr, err, "device heap", kept)
	if err := heap.Close(); err != nil {
		t.Errorf("closing the heap New left again: %v", err)
	}
}
