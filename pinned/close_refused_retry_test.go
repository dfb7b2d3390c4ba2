package pinned_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// closeRefusedOnce runs a CUDAHost pool that freed a buffer on a stream (so that it keeps
// events) to a Close whose call of kind call the driver refuses once, then Closes it again,
// which must give back what the first kept: the fake holds what it held before the pool.
func closeRefusedOnce(t *testing.T, call fakecuda.PinCall, what string) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	defer func() { ok(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	before := f.LiveObjects()
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	ok(t, "FreeAsync", p.FreeAsync(b, pubcuda.Stream(s)))
	f.Complete()
	f.FailAfter(call, 0, fakecuda.ResultInvalidValue)
	if err := p.Close(); err == nil {
		t.Fatalf("Close with the driver refusing %s: nil", what)
	}
	err = p.Close()
	if d := liveDiff(before, f.LiveObjects()); err != nil || d != "" {
		t.Errorf("Close after one that the driver refused %s: %v; the fake still holds, of the pool's: %s", what, err, d)
	}
}

// TestFakeCloseRetriesEventDestroy: a Close whose destroy of an event the driver refused
// returns that refusal and keeps the event "for a later Close"; that later Close gives it back.
func TestFakeCloseRetriesEventDestroy(t *testing.T) {
	closeRefusedOnce(t, fakecuda.CallEventDestroy, "an event's destroy")
}

// TestFakeCloseRetriesPrimaryRelease: a Close whose release of the primary context the driver
// refused returns that refusal ("a later Close tries again"); that later Close releases it.
func TestFakeCloseRetriesPrimaryRelease(t *testing.T) {
	closeRefusedOnce(t, fakecuda.CallPrimaryRelease, "the primary context's release")
}

// liveDiff says which of the fake's live counters differ between base and now.
func liveDiff(base, now map[string]int64) string {
	var s []string
	for k, v := range now {
		if v != base[k] {
			s = append(s, fmt.Sprintf("%s %d->%d", k, base[k], v))
		}
	}
	for k, v := range base {
		if _, ok := now[k]; !ok {
			s = append(s, fmt.Sprintf("%s %d->0", k, v))
		}
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
