package device

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// The pressure hook, and why it is never re-entered by its own call chain.
//
// Alloc calls the hook (Options.Pressure, SetPressure) when it finds no memory even after
// reclaiming what the streams hold, and retries while the hook says it gave some back (at most
// 3 times). A hook that allocates from the heap it relieves (directly, or through
// a hook it chains to, or a cache that refills itself) would call itself again on the same
// goroutine, and again, until the stack overflows. So an Alloc made inside the hook, on the
// goroutine running it, does not call the hook: it is served without it (memory that is free,
// and what the other streams hold, as for any Alloc), and when that is not enough it fails at
// once with an error wrapping ErrInPressureHook and ErrOutOfMemory.
//
// The call chain is told by its OS thread: while the hook runs, Alloc keeps its goroutine on
// its thread (runtime.LockOSThread) and records the thread's id in the heap; an Alloc that
// finds its own thread recorded is inside the hook. No other goroutine runs on a locked
// thread, so the record names exactly the goroutines inside the hook. Other goroutines that run
// out of memory meanwhile call the hook as before, each on its own goroutine (hooks may run
// concurrently; a uvm.Tier's serializes them on its lock). An Alloc the hook waits for on
// another goroutine is such a call: a hook must not wait for one, as it would wait again in
// the hook that Alloc calls.
//
// Cost: a thread lock and a gettid per hook call, on the out-of-memory path only.

// PressureFunc is a heap's pressure hook. It is called when an Alloc of n bytes for stream s
// finds no memory even after reclaiming what the streams hold: it may give memory of this
// heap back (a tier evicting blocks, a cache dropping entries) and returns whether the Alloc
// should try again. It is called without the heap's lock, at most 3 times per
// Alloc, on the goroutine that called Alloc, and never from inside itself: an Alloc the hook
// makes on that goroutine does not call it (above: how). s tells a hook its own allocations
// apart: a uvm.Tier allocates on its own stream while holding its lock, and answers those
// itself.
type PressureFunc func(n int, s cuda.Stream) bool

// pressureTries bounds the calls of Options.Pressure per Alloc.
const pressureTries = 3

// SetPressure makes f the heap's pressure hook (nil: none) and returns the hook it replaces,
// so that a user of a shared heap (a uvm.Tier given the heap) can chain to the hook before it
// and put it back when done. An Alloc already running may still call the previous hook.
func (h *Heap) SetPressure(f PressureFunc) (prev PressureFunc) {
	var p *PressureFunc
	if f != nil {
		p = &f
	}
	if old := h.press.Swap(p); old != nil {
		prev = *old
	}
	return prev
}

// CompareAndSwapPressure makes f the heap's pressure hook (nil: none) if the hook now is old,
// and reports whether it did: a user who installed a hook with SetPressure and is done takes it
// off, putting back the one it replaced, only if nobody installed another over it meanwhile
// (whose hook, which may chain to theirs, a SetPressure would take off). The hook now is old
// when it is the same func value (SetPressure's argument, or a copy of it: a method value or a
// closure made apart from it never is, whatever it calls), or when both are nil.
func (h *Heap) CompareAndSwapPressure(old, f PressureFunc) bool {
	var p *PressureFunc
	if f != nil {
		p = &f
	}
	for {
		cur := h.press.Load()
		if (cur == nil) != (old == nil) || cur != nil && !SamePressure(*cur, old) {
			return false
		}
		if h.press.CompareAndSwap(cur, p) {
			return true
		}
	}
}

// SamePressure reports whether a and b are one func value (or copies of it, or both nil): the
// identity CompareAndSwapPressure compares hooks by. Two method values or closures made apart
// never are, whatever they call.
func SamePressure(a, b PressureFunc) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// ErrInPressureHook means an Alloc made inside the heap's pressure hook, on the goroutine
// running it, found no memory: the hook is not called again (the error also wraps
// ErrOutOfMemory).
var ErrInPressureHook = errkind.New(pinmalloc.ErrOutOfMemory, "device: Alloc inside the heap's pressure hook")

// inHook records the threads of the goroutines running the pressure hook.
type inHook struct {
	mu   sync.Mutex
	tids []int
}

// enter records tid; false if it is recorded already (an Alloc inside the hook).
func (k *inHook) enter(tid int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if slices.Contains(k.tids, tid) {
		return false
	}
	k.tids = append(k.tids, tid)
	return true
}

func (k *inHook) leave(tid int) {
	k.mu.Lock()
	if i := slices.Index(k.tids, tid); i >= 0 {
		k.tids = slices.Delete(k.tids, i, i+1)
	}
	k.mu.Unlock()
}

// relieve runs the pressure hook for an Alloc of n bytes on s that failed with err (out of
// memory), and retries the allocation while the hook gave memory back.
func (h *Heap) relieve(press PressureFunc, n uintptr, s cuda.Stream, err error) (cuda.DevicePtr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	if !h.hooks.enter(tid) {
		return 0, fmt.Errorf("%w (not called again): %w", ErrInPressureHook, err)
	}
	defer h.hooks.leave(tid)
	var p cuda.DevicePtr
	for try := 0; try < pressureTries && press(int(n), s); try++ {
		if p, err = h.alloc(n, s); err == nil || !outOfMemory(err) {
			break
		}
	}
	return p, err
}
