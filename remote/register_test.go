package remote

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestRegistersRegionsNotBuffers: a pool of 2,000 buffers is registered with one ucp_mem_map
// per region, none per buffer, and every buffer's descriptor carries its region's key, packed
// once; the pool's Close deregisters the region.
func TestRegistersRegionsNotBuffers(t *testing.T) {
	needUCX(t)
	w := newWorker(t)
	pool, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	for range 1000 {
		b, err := pool.Alloc(16 << 10)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	before := ucx.MemMaps()
	reg, err := w.Register(pool)
	if err != nil {
		t.Fatal(err)
	}
	regions := int64(reg.Regions())
	if regions == 0 || ucx.MemMaps()-before != regions {
		t.Fatalf("%d ucp_mem_map calls to register a pool of %d regions", ucx.MemMaps()-before, regions)
	}
	for range 1000 { // more buffers, in the same region
		b, err := pool.Alloc(16 << 10)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	keys := map[string]bool{}
	for _, b := range bufs {
		d, err := reg.Describe(b)
		if err != nil {
			t.Fatal(err)
		}
		if d.Len() != len(b) || d.Worker() != w.ID() || d.Device() {
			t.Fatalf("descriptor %v of a buffer of %d bytes", d, len(b))
		}
		keys[d.rkey] = true
	}
	if got := ucx.MemMaps() - before; got != int64(reg.Regions()) || len(keys) != reg.Regions() {
		t.Fatalf("%d ucp_mem_map calls and %d distinct keys for %d buffers in %d regions", got, len(keys), len(bufs), reg.Regions())
	}
	if _, err := reg.Describe(make([]byte, 10)); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Describe of Go memory: %v", err)
	}
	if _, err := reg.Describe(bufs[0][:0]); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("Describe of an empty slice: %v", err)
	}
	for _, b := range bufs {
		if err := pool.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Describe(bufs[0]); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Describe of a freed buffer: %v", err)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if reg.Regions() != 0 || w.Stats().Regions != 0 {
		t.Fatalf("the pool's Close left %d regions registered (%d in the worker)", reg.Regions(), w.Stats().Regions)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// TestRegistrationObservesRegions drives a Registration as the arena does, with a region
// reserved PROT_NONE (address space, nothing committed, as an arena's region is at first):
// registered without pinning it, found by address, deregistered.
func TestRegistrationObservesRegions(t *testing.T) {
	needUCX(t)
	w := newWorker(t)
	const size = 64 << 20
	b, err := unix.Mmap(-1, 0, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	r := &Registration{w: w, memType: ucx.MemoryHost, regions: map[uintptr]*localRegion{}}
	g := &arena.Region{Base: mem.Addr(b), Size: size}
	before := ucx.MemMaps()
	if err := r.Mapped(g); err != nil {
		t.Fatal(err)
	}
	if ucx.MemMaps()-before != 1 || w.lookup(g.Base+100, 10) == nil || w.lookup(g.Base+size-10, 11) != nil {
		t.Fatal("the region is not registered as mapped")
	}
	if d, err := r.describe(g.Base+4096, 100); err != nil || d.base != uint64(g.Base) || d.size != size {
		t.Fatalf("describe: %v %v", d, err)
	}
	r.Unmapping(g)
	if w.lookup(g.Base+100, 10) != nil || w.Stats().Regions != 0 {
		t.Fatal("the region is registered after Unmapping")
	}
}

func TestRegisterDeviceRefusedWithoutDeviceTransports(t *testing.T) {
	needUCX(t)
	w := newWorker(t)
	if w.CUDA() {
		t.Skip("this UCX has CUDA transports: RegisterDevice is tested on the GPU machine")
	}
	if _, err := w.RegisterDevice(nil); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("RegisterDevice with a UCX without CUDA: %v, want ErrNotSupported", err)
	}
}

func TestClosedWorker(t *testing.T) {
	needUCX(t)
	w, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	pool, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := w.Register(pool); !errors.Is(err, ErrClosed) {
		t.Errorf("Register after Close: %v", err)
	}
	if _, err := w.Listen("127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close: %v", err)
	}
	if _, err := w.Address(); !errors.Is(err, ErrClosed) {
		t.Errorf("Address after Close: %v", err)
	}
	if _, err := w.Dial(t.Context(), []byte("pmra")); !errors.Is(err, ErrDescriptor) {
		t.Errorf("Dial of a bad address: %v", err)
	}
}

// TestNoUCX runs a process whose UCX library cannot be loaded: New reports ErrNoUCX, naming
// the library, and nothing else happens. Its text says UCX once: it said "remote: UCX not
// available: pinmalloc: no UCX library: ... (install UCX: ...)", the kind's text after the
// sentinel's, which says it already. It needs no UCX.
func TestNoUCX(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=target", ucx.LibraryEnv+"=/nonexistent/libucp.so.0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	line := string(out)
	// A build without cgo loads no library at all: its error says so instead of naming one.
	why := "/nonexistent/libucp.so.0"
	if !cgoBuild {
		why = "built without cgo"
	}
	if !strings.HasPrefix(line, "E "+ErrNoUCX.Error()+": ") || !strings.Contains(line, why) {
		t.Fatalf("New without UCX: %q, want an error of %v naming %q", line, ErrNoUCX, why)
	}
	if n := strings.Count(line, "UCX"); n != 1 {
		t.Errorf("New without UCX: %q says UCX %d times; want once", line, n)
	}
	if _, err := New(Options{MaxInFlight: -1}); !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Errorf("New with MaxInFlight -1: %v", err)
	}
}

// TestRegistrationCloseWaitsForQueued: a transfer started while every slot is in flight waits in
// the worker's queue, its operations not yet posted; its local buffers' registration must not be
// closed under it (ErrBusy, as for operations in flight): its operations name the registration
// (ucp_mem_h) when they are posted later, and Close would have unmapped it (ucp_mem_unmap) first.
func TestRegistrationCloseWaitsForQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, _, r1, r2, c1, _ := connectedPair(t, ctx)
	src, dst := liveBuffer(t, r1, 64<<10), liveBuffer(t, r2, 64<<10)
	fill(src, 3)
	d := describe(t, r2, dst)
	w1.mu.Lock()
	saved := w1.ops
	w1.ops = w1.opts.MaxInFlight // every operation slot in flight: the transfer waits in the queue
	w1.mu.Unlock()
	tr := c1.NewTransfer()
	if err := tr.Put(src, d); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r1.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close of the registration of a queued transfer's buffer: %v, want ErrBusy", err)
	}
	w1.mu.Lock()
	w1.ops = saved
	w1.signal()
	w1.mu.Unlock()
	if err := tr.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, "put", dst, 3)
	if err := r1.Close(); err != nil {
		t.Fatalf("Close once the transfer ended: %v", err)
	}
}

// TestDescribeAfterClose: Describe after the registration's Close, or the worker's, says
// ErrClosed (as documented), not that the memory is of no registration.
func TestDescribeAfterClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, _, r1, r2, _, _ := connectedPair(t, ctx)
	b1, b2 := liveBuffer(t, r1, 4096), liveBuffer(t, r2, 4096)
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Describe(b2); !errors.Is(err, ErrClosed) {
		t.Errorf("Describe after the registration's Close: %v, want ErrClosed", err)
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Describe(b1); !errors.Is(err, ErrClosed) {
		t.Errorf("Describe after the worker's Close: %v, want ErrClosed", err)
	}
}
