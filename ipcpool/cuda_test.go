package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The CUDA paths against the fake driver, which is as strict as the real one: a copy whose
// host range is not inside one registration (or one run of mapped VMM granules) fails, and
// unregistered memory copies as pageable (counted).

var cudaHost = pinned.Options{Backend: pinned.CUDAHost}

// queueCopyInto queues a copy of 4 KiB of device memory into buf on a new stream of d, which
// the fake driver f leaves pending (its late execution) until something waits for the stream;
// the stream and the device memory go when the test ends.
func queueCopyInto(t *testing.T, f *fakecuda.Driver, d *cuda.Device, buf []byte) {
	t.Helper()
	dp, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	t.Cleanup(func() {
		for _, err := range []error{d.StreamSynchronize(s), d.StreamDestroy(s), d.MemFree(dp)} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	must(t, "MemcpyDtoHAsync", d.MemcpyDtoHAsync(mem.Addr(buf), dp, 4096, s))
	if f.Pending() == 0 {
		t.Fatal("the copy ran at once: the fake driver's late execution is off")
	}
}

// A process that leaves with a copy still queued on one of its streams into its buffer: the
// copy has run before its grants go back to the owner (who may hand them to another process
// at once), not after.
func TestFakeCloseWaitsForStreams(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	w, path := serveTest(t, Options{Size: 4 << 20})
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	queueCopyInto(t, f, d, b)
	if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a buffer live: %v", err)
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("Close gave the grants back with %d streams still to run (a copy into the pool)", n)
	}
	if w.Attached() != 0 {
		t.Fatal("still attached after Close returned")
	}
}

// A process that dies holding a buffer another process still copies into on its stream: the
// dead process's grant is handed out again only after that stream has passed (the survivor
// synchronized at the fence), not while the copy is queued.
func TestFakeDeadGrantsWaitForPeersStreams(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	// q passes fences at its drain ticks only: the owner's Alloc below must wait for one.
	w, q, dead, qb := copyIntoDeadsBuffer(t, f, d, 200*time.Millisecond)
	// The process dies: its socket closes without a detach (in this process, the owner does
	// not wait for an exit).
	dead.cl.hangUp()
	waitFor(t, func() bool { return w.Attached() == 1 })
	ob, err := w.Alloc(4096) // waits for the fence: memory free but fenced is no "pool full"
	must(t, "owner Alloc of the dead process's grant", err)
	if n := f.Pending(); n != 0 {
		t.Fatalf("the dead process's grant was handed out with %d streams still to run (a peer's copy into it)", n)
	}
	for _, e := range []error{w.Free(ob), q.Free(qb), q.Close()} {
		must(t, "end", e)
	}
}

// copyIntoDeadsBuffer serves a pool of two 2 MiB grants, attaches q (a CUDAHost pool, draining
// every drain, or at its default interval when 0) and dead, and queues on q's device a copy into
// a buffer of dead's grant, handed to q, which the fake holds: dead is to die (cl.hangUp) with the
// copy still queued. qb is q's own buffer, in the pool's other grant.
func copyIntoDeadsBuffer(t *testing.T, f *fakecuda.Driver, d *cuda.Device, drain time.Duration) (w *Owner, q, dead *Process, qb []byte) {
	t.Helper()
	w, path := serveTest(t, Options{Size: 4 << 20, GrantSize: 2 << 20})
	q, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, DrainInterval: drain})
	must(t, "Attach", err)
	dead = attachTest(t, path, AttachOptions{})
	b, err := dead.Alloc(4096) // the dead process's grant
	must(t, "Alloc", err)
	qb, err = q.Alloc(4096) // the pool's other grant
	must(t, "Alloc", err)
	h, err := dead.Handle(b)
	must(t, "Handle", err)
	peer, err := q.Bytes(h)
	must(t, "Bytes", err)
	queueCopyInto(t, f, d, peer)
	return w, q, dead, qb
}

// A fence a process meets while a stream of its context captures a CUDA graph: the synchronize
// of the context that passes it is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, in every
// capture mode), which is no sticky error: the copies queued in the context are still to run.
// The process passes the fence only once a synchronize succeeds (after the capture), so the
// dead process's grant is handed out with no peer's copy into it still queued.
func TestFakeFenceWaitsOutCapture(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	w, q, dead, qb := copyIntoDeadsBuffer(t, f, d, 0)
	// A user's capture on a stream of its own (RELAXED: it may end on any thread), held for
	// longer than the fence takes to come.
	cs, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "StreamBeginCapture", d.StreamBeginCapture(cs, cuda.CaptureRelaxed))
	ended := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		g, err := d.StreamEndCapture(cs) // invalidated by the refused synchronize: no graph
		if g != 0 {
			err = errors.Join(err, d.GraphDestroy(g))
		}
		ended <- err
	}()
	t.Cleanup(func() { must(t, "StreamDestroy", d.StreamDestroy(cs)) })
	dead.cl.hangUp()
	waitFor(t, func() bool { return w.Attached() == 1 })
	ob, err := w.Alloc(4096) // waits for the fence, which waits for the capture to end
	must(t, "owner Alloc of the dead process's grant", err)
	if n := f.Pending(); n != 0 {
		t.Fatalf("the dead process's grant was handed out with %d streams still to run (a peer's copy "+
			"into it): the fence was passed on a synchronize the capture refused", n)
	}
	t.Logf("capture ended: %v", <-ended)
	for _, e := range []error{w.Free(ob), q.Free(qb), q.Close()} {
		must(t, "end", e)
	}
}

// A Close while a stream of the process's CUDA context captures a CUDA graph, with a copy into
// one of its buffers still queued: the synchronize of the context it waits with is refused (in
// every capture mode), so it refuses too, with an error matching cuda.ErrCapturing, and leaves
// nothing: the process stays attached, its pool mapped, the copy queued. A Close after the
// capture leaves as ever. Close gave the grants back (and unregistered and unmapped the owner's
// pool memory) under the queued copy, which then faulted.
func TestFakeCloseBesideCaptureRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	cs, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", d.StreamDestroy(cs)) })
	capture := func() (end func()) { // a user's capture (RELAXED: it may end on any thread)
		must(t, "StreamBeginCapture", d.StreamBeginCapture(cs, cuda.CaptureRelaxed))
		return func() {
			if g, err := d.StreamEndCapture(cs); g != 0 { // invalidated by the refused synchronize
				must(t, "GraphDestroy", errors.Join(err, d.GraphDestroy(g)))
			}
		}
	}
	w, path := serveTest(t, Options{Size: 4 << 20, Pool: cudaHost})
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	queueCopyInto(t, f, d, b)
	end := capture()
	if err := p.Close(); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("Close beside a capture = %v, want an error matching cuda.ErrCapturing", err)
	}
	if w.Attached() != 1 || f.Pending() == 0 {
		t.Fatalf("a refused Close left: %d processes attached, %d streams to run; want 1, 1", w.Attached(), f.Pending())
	}
	end()
	if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close after the capture with a buffer live: %v", err)
	}
	if f.Pending() != 0 || w.Attached() != 0 {
		t.Fatalf("Close after the capture: %d streams to run, %d attached; want 0, 0", f.Pending(), w.Attached())
	}
	// The owner's own Close, with its copy queued, the same way.
	ob, err := w.Alloc(4096)
	must(t, "owner Alloc", err)
	queueCopyInto(t, f, d, ob)
	end = capture()
	if err := w.Close(); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("owner Close beside a capture = %v, want an error matching cuda.ErrCapturing", err)
	}
	if f.Pending() == 0 {
		t.Fatal("a refused owner Close ran the queued copy")
	}
	ob2, err := w.Alloc(4096)
	must(t, "owner Alloc after a refused Close", err)
	must(t, "owner Free", w.Free(ob2))
	end()
	must(t, "owner Free", w.Free(ob))
	must(t, "owner Close after the capture", w.Close())
	if f.Pending() != 0 {
		t.Fatalf("owner Close after the capture: %d streams to run", f.Pending())
	}
}

// A pool bigger than the registration cap is made of regions no bigger than it, each one
// registration in every CUDAHost process; a buffer copies by DMA from the owner and from an
// attached process; everything is unregistered at the end.
func TestFakeRegisteredInPieces(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if _, err := (Options{Size: 8 << 20, RegionSize: 8 << 20, MaxRegistration: 4 << 20}).layout(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("a region above the registration cap: %v", err)
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, MaxRegistration: 4 << 20, Pool: cudaHost, FallbackPageable: true})
	must(t, "Serve", err)
	if st := w.SharedStats(); w.regions != 2 || st.Registered != 2 || f.Stat(fakecuda.Registrations) != 2 {
		t.Fatalf("%d regions, %d registered, %d registrations; want 2 of each", w.regions, st.Registered, f.Stat(fakecuda.Registrations))
	}
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, FallbackPageable: true})
	must(t, "Attach", err)
	if n := f.Stat(fakecuda.Registrations); n != 4 {
		t.Fatalf("%d registrations with a process attached, want 4", n)
	}
	dst, err := d.MemAlloc(1 << 20)
	must(t, "MemAlloc", err)
	for _, q := range []*Process{w.Process, p} {
		b, err := q.Alloc(1 << 20)
		must(t, "Alloc", err)
		before := f.Stat(fakecuda.PinnedCopies)
		must(t, "MemcpyHtoD", d.MemcpyHtoD(dst, mem.Addr(b), 1<<20))
		if f.Stat(fakecuda.PinnedCopies) != before+1 {
			t.Errorf("slot %d: the copy was not from pinned memory", q.Slot())
		}
		must(t, "Free", q.Free(b))
	}
	must(t, "MemFree", d.MemFree(dst))
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
	if n := f.Stat(fakecuda.Registrations); n != 0 {
		t.Fatalf("%d registrations left", n)
	}
}

// A registration the driver refuses fails Serve, or with FallbackPageable leaves the region
// unregistered and says so.
func TestFakeRegisterRefused(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	if _, err := Serve(path, Options{Size: 4 << 20, Pool: cudaHost}); !errors.Is(err, pcuda.ErrOutOfMemory) {
		t.Fatalf("Serve with the registration refused: %v", err)
	}
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	w, err := Serve(path, Options{Size: 4 << 20, Pool: cudaHost, FallbackPageable: true})
	must(t, "Serve", err)
	if st := w.SharedStats(); st.Registered != 0 || len(st.PageableRegions) != 1 {
		t.Fatalf("%d registered, fallbacks %q; want 0 and one", st.Registered, st.PageableRegions)
	}
	b, err := w.Alloc(100)
	must(t, "Alloc", err)
	must(t, "Free", w.Free(b))
	must(t, "Close", w.Close())
}

// A VMM pool: the owner's regions are exportable host granules, an attached process (here,
// and another process) imports and maps them; buffers pass by handle both ways; a killed
// process's memory comes back; every driver object is gone at the end.
func TestFakeVMMPool(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	if _, err := Serve(path, Options{Size: 8 << 20, VMM: true}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("a VMM pool without a device: %v", err)
	}
	w, err := Serve(path, Options{Size: 8 << 20, VMM: true, Pool: cudaHost})
	must(t, "Serve", err)
	if _, err := Attach(context.Background(), path, AttachOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("attaching to a VMM pool without a device: %v", err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	fill(b, 5)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	ob, err := w.Bytes(h)
	must(t, "Bytes", err)
	must(t, "verify", verify(ob, 5))
	// The same pool from another process: it imports the granules there.
	k := startChild(t, path, childDevEnv+"=1", childQuietEnv+"=1")
	kh := k.alloc(t, 3000, 6)
	kb, err := w.Bytes(kh)
	must(t, "Bytes", err)
	must(t, "verify", verify(kb, 6))
	if got := k.do(t, "C %s 5", fmtHandle(h)); got != "OK" {
		t.Fatalf("the child reads the attached process's buffer: %s", got)
	}
	if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { p.Collect(); return p.Pool.Stats().Live == 0 })
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.dead = true
	waitFor(t, func() bool { return w.Attached() == 1 })
	if _, err := w.Bytes(kh); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the killed process's handle: %v", err)
	}
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
}

// TestFakeMultiProcess is TestMultiProcess with every process registering the regions with
// its CUDA context.
func TestFakeMultiProcess(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	multiProcess(t, Options{Pool: cudaHost}, childDevEnv+"=1")
}
