package cudamem_test

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeProvidersBesideCapture: while a user's thread captures a stream in the default
// GLOBAL mode, every provider commits and gives back memory on other threads (the arena's
// Alloc, Trim, purge and Close run there): its driver calls run in RELAXED mode, so the driver refuses
// none of them and the user's capture stays valid. cuMemAlloc (DeviceMalloc) and cuMemFreeHost
// (HostAlloc) were refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture
// invalidated: its end gave no graph.
func TestFakeProvidersBesideCapture(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	providers := providersOf(d, "DeviceMalloc", "DeviceVMM", "HostAlloc", "HostVMM", "HostRegister", "Managed")
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer d.StreamDestroy(s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, pr := range providers {
		p, err := pr.new()
		must(t, pr.name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		must(t, "StreamBeginCapture", d.StreamBeginCapture(s, 0)) // GLOBAL, on this thread
		done := make(chan error)
		go func() { // another thread
			sp, err := a.Alloc(3<<20, arena.DefaultChunkSize)
			if err == nil {
				err = a.Free(sp)
			}
			a.Trim()
			if cerr := a.Close(); err == nil {
				err = cerr
			}
			done <- err
		}()
		if err := <-done; err != nil {
			t.Errorf("%s: Alloc, Free, Trim and Close beside a GLOBAL capture: %v", pr.name, err)
		}
		g, err := d.StreamEndCapture(s)
		if err != nil || g == 0 {
			t.Errorf("%s: the capture ended with graph %#x, %v: invalidated by the provider's calls", pr.name, g, err)
		} else {
			must(t, "GraphDestroy", d.GraphDestroy(g))
		}
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after Close: %+v", pr.name, c)
		}
	}
}

// TestFakeZeroBesideBlockingCapture: while a user's thread captures a blocking stream, the
// device and managed providers clear memory (arena.Zeroer: heap.Zalloc) on another thread,
// the bytes read zero, and the user's capture stays valid. Before, the clear was a cuMemsetD8
// and a synchronize of the legacy default stream, which the driver refuses while a blocking
// stream captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), invalidating that capture: Zero failed,
// and the capture ended with no graph.
func TestFakeZeroBesideBlockingCapture(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	providers := providersOf(d, "DeviceMalloc", "DeviceVMM", "Managed")
	s, err := d.StreamCreate(false) // blocking: the legacy stream waits for it
	must(t, "StreamCreate", err)
	defer d.StreamDestroy(s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 1 << 20
	for _, pr := range providers {
		p, err := pr.new()
		must(t, pr.name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		sp, err := a.Alloc(n, arena.DefaultChunkSize)
		must(t, "Alloc", err)
		must(t, "MemsetD8", d.MemsetD8(sp.Base, 0xa5, n))
		must(t, "Synchronize", d.Synchronize())
		must(t, "StreamBeginCapture", d.StreamBeginCapture(s, cuda.CaptureGlobal)) // on this thread
		done := make(chan error)
		go func() { done <- p.(arena.Zeroer).Zero(sp.Base, n) }() // another thread
		if err := <-done; err != nil {
			t.Errorf("%s: Zero beside a capture of a blocking stream: %v", pr.name, err)
		}
		g, err := d.StreamEndCapture(s)
		if err != nil || g == 0 {
			t.Errorf("%s: the capture ended with graph %#x, %v: invalidated by Zero", pr.name, g, err)
		} else {
			must(t, "GraphDestroy", d.GraphDestroy(g))
		}
		got := make([]byte, n)
		must(t, "MemcpyDtoH", d.MemcpyDtoH(uintptr(unsafe.Pointer(&got[0])), sp.Base, n))
		if i := bytes.IndexFunc(got, func(r rune) bool { return r != 0 }); i >= 0 {
			t.Errorf("%s: byte %d of the cleared range reads %#x", pr.name, i, got[i])
		}
		must(t, "Free", a.Free(sp))
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after Close: %+v", pr.name, c)
		}
	}
}
