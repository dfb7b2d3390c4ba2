//go:build cgo && linux

package cuda

// The stream capture calls (capture.go).

/*
#include <stdint.h>

// cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode)
static int pmc_begin(uintptr_t fn, uintptr_t s, int mode) {
	return ((int (*)(void *, int))fn)((void *)s, mode);
}
// cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *): the answer packs 1 above the
// CUresult when the call failed, or is the mode the thread had.
static uint64_t pmc_exchangeMode(uintptr_t fn, int mode) {
	int m = mode;
	int r = ((int (*)(int *))fn)(&m);
	if (r != 0) return (uint64_t)1 << 32 | (uint32_t)r;
	return (uint32_t)m;
}
// cuStreamEndCapture(CUstream, CUgraph *)
static int pmc_end(uintptr_t fn, uintptr_t s, uintptr_t *g) {
	void *h = NULL;
	int r = ((int (*)(void *, void **))fn)((void *)s, &h);
	*g = (uintptr_t)h;
	return r;
}
// pmc_hook, when set (tests: Device.HookCaptureCheck), is a function of the driver library
// that a cuStreamIsCapturing answering "not capturing" calls, once, with pmc_hookOp, 1 and 0,
// before the call the answer allows, after pmc_hookSkip such answers have passed it: a fake
// driver's control that makes its next call stop there, for a test to begin a capture then.
static uintptr_t pmc_hook;
static int pmc_hookOp, pmc_hookSkip;
static void pmc_setHook(uintptr_t fn, int op, int skip) {
	__atomic_store_n(&pmc_hookOp, op, __ATOMIC_RELAXED);
	__atomic_store_n(&pmc_hookSkip, skip, __ATOMIC_RELAXED);
	__atomic_store_n(&pmc_hook, fn, __ATOMIC_RELEASE);
}
static void pmc_afterCheck(void) {
	if (__atomic_load_n(&pmc_hook, __ATOMIC_ACQUIRE) == 0) return;
	if (__atomic_fetch_sub(&pmc_hookSkip, 1, __ATOMIC_ACQ_REL) > 0) return;
	uintptr_t fn = __atomic_exchange_n(&pmc_hook, 0, __ATOMIC_ACQ_REL);
	if (fn) ((long (*)(int, long, long))fn)(__atomic_load_n(&pmc_hookOp, __ATOMIC_RELAXED), 1, 0);
}
// cuCtxPushCurrent_v2(ctx), cuStreamIsCapturing(s, &status), cuCtxPopCurrent_v2 in one call,
// as pm_inCtx: the answer packs the stage that failed (1 push, 2 the call, 3 pop) above the
// CUresult, or is the status (stage 0). No Go pointer crosses: a status out-parameter would
// escape to the heap at every call.
static uint64_t pmc_isCapturingIn(uintptr_t push, uintptr_t pop, uintptr_t ctx, uintptr_t fn, uintptr_t s) {
	int r = ((int (*)(void *))push)((void *)ctx);
	if (r != 0) return (uint64_t)1 << 32 | (uint32_t)r;
	int status = 0;
	r = ((int (*)(void *, int *))fn)((void *)s, &status);
	if (r == 0 && status == 0) pmc_afterCheck();
	void *c = NULL;
	int pr = ((int (*)(void **))pop)(&c);
	if (r != 0) return (uint64_t)2 << 32 | (uint32_t)r;
	if (pr != 0) return (uint64_t)3 << 32 | (uint32_t)pr;
	return (uint32_t)status;
}
// cuCtxPushCurrent_v2(ctx), cuStreamIsCapturing(s, &status), and cuEventRecord(ev, s) only if
// s is not capturing, then cuStreamIsCapturing again (a capture begun on another thread
// between the ask and the record, and still going on, took the record), then
// cuCtxPopCurrent_v2, in one cgo call. The answer packs the stage above the CUresult or
// status: 0 recorded, 1 push failed, 2 cuStreamIsCapturing failed (nothing recorded), 3 pop
// failed, 4 s captures (the status; nothing recorded), 5 the record failed, 6 recorded and s
// captures now (the status: the record may be the capture's), 7 recorded and the second ask
// failed (its CUresult).
static uint64_t pmc_recordOutsideCaptureIn(uintptr_t push, uintptr_t pop, uintptr_t ctx, uintptr_t isCap, uintptr_t rec, uintptr_t ev, uintptr_t s) {
	int r = ((int (*)(void *))push)((void *)ctx);
	if (r != 0) return (uint64_t)1 << 32 | (uint32_t)r;
	int status = 0;
	uint64_t out = 0;
	r = ((int (*)(void *, int *))isCap)((void *)s, &status);
	if (r != 0) out = (uint64_t)2 << 32 | (uint32_t)r;
	else if (status != 0) out = (uint64_t)4 << 32 | (uint32_t)status;
	else {
		pmc_afterCheck();
		if ((r = ((int (*)(void *, void *))rec)((void *)ev, (void *)s)) != 0)
			out = (uint64_t)5 << 32 | (uint32_t)r;
		else if ((r = ((int (*)(void *, int *))isCap)((void *)s, &status)) != 0)
			out = (uint64_t)7 << 32 | (uint32_t)r;
		else if (status != 0) out = (uint64_t)6 << 32 | (uint32_t)status;
	}
	void *c = NULL;
	int pr = ((int (*)(void **))pop)(&c);
	if (out == 0 && pr != 0) return (uint64_t)3 << 32 | (uint32_t)pr;
	return out;
}
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
)

func (dr *driver) streamBeginCapture(s Stream, mode CaptureMode) error {
	return dr.call(symStreamBeginCapture, func(f C.uintptr_t) C.int {
		return C.pmc_begin(f, C.uintptr_t(s), C.int(mode))
	})
}

func (dr *driver) streamEndCapture(s Stream) (Graph, error) {
	var g C.uintptr_t
	err := dr.call(symStreamEndCapture, func(f C.uintptr_t) C.int { return C.pmc_end(f, C.uintptr_t(s), &g) })
	return Graph(g), err
}

func (dr *driver) graphDestroy(g Graph) error { return dr.callPtr(symGraphDestroy, uintptr(g)) }

func (dr *driver) threadExchangeCaptureMode(mode CaptureMode) (CaptureMode, error) {
	f, err := dr.fn(symThreadExchangeStreamCaptureMode)
	if err != nil {
		return 0, err
	}
	out := C.pmc_exchangeMode(f, C.int(mode))
	if out>>32 != 0 {
		return 0, check(C.int(int32(uint32(out))))
	}
	return CaptureMode(int32(uint32(out))), nil
}

// streamIsCapturingIn is cuStreamIsCapturing in context ctx, in one cgo call.
func (dr *driver) streamIsCapturingIn(ctx uintptr, s Stream) (CaptureStatus, error) {
	f, err := dr.fn(symStreamIsCapturing) // first: an old driver's error names it
	if err != nil {
		return CaptureNone, err
	}
	push, pop, err := dr.pushPop()
	if err != nil {
		return CaptureNone, err
	}
	out := C.pmc_isCapturingIn(push, pop, C.uintptr_t(ctx), f, C.uintptr_t(s))
	if out>>32 == 0 {
		return CaptureStatus(int32(uint32(out))), nil
	}
	r := check(C.int(int32(uint32(out))))
	switch out >> 32 {
	case 1:
		return CaptureNone, wrap(r, "push primary context")
	case 3:
		return CaptureNone, wrap(r, "pop primary context")
	}
	return CaptureNone, r
}

// eventRecordOutsideCaptureIn records ev in s in context ctx unless s is capturing, in one cgo
// call (Device.EventRecordOutsideCapture), and reports the record tainted when s may have begun
// capturing before it: the event may be the capture's. free reports that an ask found s not
// capturing (for reapLetGo). A driver without cuStreamIsCapturing records.
func (dr *driver) eventRecordOutsideCaptureIn(ctx uintptr, ev Event, s Stream) (
	st CaptureStatus, tainted, free bool, err error) {
	isCap, err := dr.fn(symStreamIsCapturing)
	if err != nil {
		return CaptureNone, false, false, dr.eventRecordIn(ctx, ev, s)
	}
	rec, err := dr.fn(symEventRecord)
	if err != nil {
		return CaptureNone, false, false, err
	}
	push, pop, err := dr.pushPop()
	if err != nil {
		return CaptureNone, false, false, err
	}
	out := C.pmc_recordOutsideCaptureIn(push, pop, C.uintptr_t(ctx), isCap, rec, C.uintptr_t(ev), C.uintptr_t(s))
	low := int32(uint32(out))
	switch out >> 32 {
	case 0:
		return CaptureNone, false, true, nil
	case 1:
		return CaptureNone, false, false, wrap(check(C.int(low)), "push primary context")
	case 2:
		if r := check(C.int(low)); errors.Is(r, pinmalloc.ErrCapturing) {
			return CaptureNone, false, false, r
		}
		// A stream it refuses: the record says why.
		return CaptureNone, false, false, dr.eventRecordIn(ctx, ev, s)
	case 3:
		return CaptureNone, false, false, wrap(check(C.int(low)), "pop primary context")
	case 4:
		return CaptureStatus(low), false, false, nil
	case 6:
		return CaptureStatus(low), true, false, nil
	case 7:
		if errors.Is(check(C.int(low)), pinmalloc.ErrCapturing) {
			// The legacy stream, while a blocking stream captures: the driver refuses a record
			// there then, so the record came before the capture and is a point of its own.
			return CaptureNone, false, false, nil
		}
		return CaptureActive, true, false, nil // nothing says the record is not the capture's
	}
	return CaptureNone, false, false, check(C.int(low))
}

// hookCaptureCheck sets the hook of the check that finds a stream not capturing after skip
// others (pmc_hook): the library's function named sym, called with op, 1 and 0.
func (dr *driver) hookCaptureCheck(sym string, op, skip int) error {
	fn := C.uintptr_t(0)
	if sym != "" {
		if fn = dr.symbol(sym); fn == 0 {
			return fmt.Errorf("%w: %s in %s", pinmalloc.ErrSymbol, sym, dr.path)
		}
	}
	C.pmc_setHook(fn, C.int(op), C.int(skip))
	return nil
}
