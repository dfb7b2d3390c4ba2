//go:build cgo && linux

package cuda

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestQueriesInContext: StreamQuery, EventQuery and EventRecord push the device's context, make
// the call and pop the context in one cgo call (inCtx): the fake answers each only with a
// context current, and the thread has none after each, whether the call succeeded or failed
// (NOT_READY); a context the driver refuses is reported as the push's error.
func TestQueriesInContext(t *testing.T) {
	with, _ := buildFake(t)
	dr, err := loadFrom(with)
	must(t, "loadFrom", err)
	defer dr.close()
	must(t, "init", dr.init())
	d, err := openOn(dr, 0)
	must(t, "openOn", err)
	defer d.Close()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer d.StreamDestroy(s)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer d.EventDestroy(ev)
	p, err := d.MemAlloc(64)
	must(t, "MemAlloc", err)
	defer d.MemFree(p)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// noContext checks that no context is current on this thread: a call that needs one, made
	// outside Do, is refused.
	noContext := func(after string) {
		t.Helper()
		if _, _, err := dr.memGetInfo(); !errors.Is(err, resultInvalidContext) {
			t.Fatalf("after %s, a call outside Do = %v, want CUDA_ERROR_INVALID_CONTEXT (a context left current)", after, err)
		}
	}
	noContext("nothing")
	if err := d.EventQuery(ev); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Fatalf("EventQuery of an event never recorded = %v, want pinmalloc.ErrNotReady", err)
	}
	noContext("a failed EventQuery")
	must(t, "MemsetD8Async", d.MemsetD8Async(p, 1, 64, s)) // the fake's stream has work pending
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Fatalf("StreamQuery with work pending = %v, want pinmalloc.ErrNotReady", err)
	}
	noContext("a failed StreamQuery")
	must(t, "StreamQuery", d.StreamQuery(s))
	noContext("StreamQuery")
	must(t, "EventRecord", d.EventRecord(ev, s))
	noContext("EventRecord")
	must(t, "EventQuery", d.EventQuery(ev))
	noContext("EventQuery")

	bad := &Device{drv: dr, ordinal: 0, dev: d.dev, ctx: 0xbad}
	for name, err := range map[string]error{"StreamQuery": bad.StreamQuery(s), "EventQuery": bad.EventQuery(ev), "EventRecord": bad.EventRecord(ev, s)} {
		if !errors.Is(err, resultInvalidContext) || !strings.Contains(err.Error(), "push primary context") {
			t.Errorf("%s in a context the driver refuses = %v, want the push's CUDA_ERROR_INVALID_CONTEXT", name, err)
		}
	}
	noContext("a refused push")
	closed := &Device{drv: dr, ordinal: 0, dev: d.dev, ctx: d.ctx}
	closed.closed.Store(true)
	if err := closed.StreamQuery(s); !errors.Is(err, pinmalloc.ErrClosed) {
		t.Errorf("StreamQuery on a closed Device = %v, want pinmalloc.ErrClosed", err)
	}
	_, errName := closed.Name()
	_, errTotal := closed.TotalMem()
	_, errAttr := closed.Attribute(AttrUnifiedAddressing)
	_, errPool := closed.DefaultMemPool()
	for name, err := range map[string]error{"Name": errName, "TotalMem": errTotal, "Attribute": errAttr, "DefaultMemPool": errPool} {
		if !errors.Is(err, pinmalloc.ErrClosed) {
			t.Errorf("%s on a closed Device = %v, want pinmalloc.ErrClosed", name, err)
		}
	}
}
