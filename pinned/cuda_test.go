package pinned_test

// The CUDAHost and Auto backends against the fake driver of internal/fakecuda (each test runs in
// a child process that loads it, or that can load no driver at all). The fake is as strict as
// the real driver: a copy whose host range is not inside one registration, one cuMemHostAlloc
// block or one run of mapped VMM host granules fails with CUDA_ERROR_INVALID_VALUE, and
// unregistered memory copies as pageable (counted). So every pool buffer is copied whole, both
// ways, and the pageable counter must stay at zero.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func newPool(t *testing.T, o pinned.Options) *pinned.Pool {
	t.Helper()
	p, err := pinned.New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return p
}

func closePool(t *testing.T, f *fakecuda.Driver, p *pinned.Pool) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, s := range []fakecuda.Stat{fakecuda.Registrations, fakecuda.Reservations, fakecuda.Handles, fakecuda.Mappings, fakecuda.HostVMMBytes} {
		if n := f.Stat(s); n != 0 {
			t.Errorf("after Close: the fake holds %v", f.LiveObjects())
			break
		}
	}
}

// copier copies pool buffers through device memory and checks the bytes.
type copier struct {
	t   *testing.T
	dev *cuda.Device
	d   cuda.DevicePtr
	n   uintptr
	s   cuda.Stream
	i   int
	// want holds the bytes a buffer must come back with: grown to the largest, not allocated
	// per copy (the Go heap's page faults for tens of megabytes were most of the tests' time).
	want []byte
}

func newCopier(t *testing.T, n uintptr) *copier {
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatalf("cuda.Open: %v", err)
	}
	d, err := dev.MemAlloc(n)
	if err != nil {
		t.Fatalf("MemAlloc: %v", err)
	}
	s, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatalf("StreamCreate: %v", err)
	}
	c := &copier{t: t, dev: dev, d: d, n: n, s: s}
	t.Cleanup(func() {
		if err := errors.Join(dev.StreamDestroy(s), dev.MemFree(d), dev.Close()); err != nil {
			t.Errorf("copier cleanup: %v", err)
		}
	})
	return c
}

// roundTrip fills b, copies it to the device, clears it, copies it back and compares; every
// other call uses the async copies on a stream.
func (c *copier) roundTrip(b []byte) {
	c.t.Helper()
	n := uintptr(len(b))
	if n > c.n {
		c.t.Fatalf("buffer of %d bytes, device scratch of %d", n, c.n)
	}
	seed := byte(c.i*13 + 1)
	for i := range b[:min(len(b), 251)] {
		b[i] = seed + byte(i)
	}
	for k := 251; k < len(b); k *= 2 { // a pattern of period 251, copied by doubling
		copy(b[k:], b[:k])
	}
	if cap(c.want) < len(b) {
		c.want = make([]byte, len(b))
	}
	want := c.want[:len(b)]
	copy(want, b)
	p := mem.Addr(b)
	var err error
	if c.i++; c.i%2 == 0 {
		err = c.dev.MemcpyHtoD(c.d, p, n)
		clear(b)
		if err == nil {
			err = c.dev.MemcpyDtoH(p, c.d, n)
		}
	} else {
		err = c.dev.MemcpyHtoDAsync(c.d, p, n, c.s)
		if err == nil {
			err = c.dev.StreamSynchronize(c.s)
		}
		clear(b)
		if err == nil {
			err = c.dev.MemcpyDtoHAsync(p, c.d, n, c.s)
		}
		if err == nil {
			err = c.dev.StreamSynchronize(c.s)
		}
	}
	if err != nil {
		c.t.Fatalf("copy of a %d-byte buffer at %#x (offset %#x in its 2 MiB): %v", n, p, p%(2<<20), err)
	}
	if !bytes.Equal(b, want) {
		c.t.Fatalf("a %d-byte buffer at %#x changed in a round trip through the device", n, p)
	}
}

// classSizes returns sizes that meet every size class (eight to each doubling, from 16 B to
// 256 KiB), object sizes up to 1 MiB, and huge sizes up to most.
func classSizes(most int) []int {
	var sizes []int
	for k := 16; k < 256<<10; k *= 2 {
		for j := 0; j < 8; j++ {
			sizes = append(sizes, k+j*k/8+1)
		}
	}
	for _, n := range []int{256 << 10, 300 << 10, 700 << 10, 1 << 20, 1<<20 + 1, 3<<20 + 4097, 16 << 20, 64<<20 + 12345} {
		if n <= most {
			sizes = append(sizes, n)
		}
	}
	for n := 128 << 20; n <= most; n *= 2 {
		sizes = append(sizes, n)
	}
	return sizes
}

// copyEverything allocates, for every size, enough buffers that their blocks cross several
// 32 KiB slice boundaries of their pages (where pages commit piece by piece), copies each one
// whole both ways, and checks the device pointer of each.
func copyEverything(t *testing.T, f *fakecuda.Driver, p *pinned.Pool, most int) {
	c := newCopier(t, uintptr(most))
	for _, n := range classSizes(most) {
		count := min(max(3, (96<<10)/n+1), 700)
		if n >= 4<<20 {
			count = 1
		}
		bufs := make([][]byte, 0, count)
		for i := 0; i < count; i++ {
			b, err := p.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc(%d): %v", n, err)
			}
			bufs = append(bufs, b)
			c.roundTrip(b)
			if dp, err := p.DevicePointer(b); err != nil || dp != pcuda.DevicePtr(mem.Addr(b)) {
				t.Fatalf("DevicePointer of a %d-byte buffer = %#x, %v", n, dp, err)
			}
		}
		for _, b := range bufs {
			if err := p.Free(b); err != nil {
				t.Fatalf("Free: %v", err)
			}
		}
	}
	if n := f.Stat(fakecuda.PageableCopies); n != 0 {
		t.Errorf("%d copies of pool buffers were pageable", n)
	}
}

// hugestCopy bounds the buffers copyEverything copies on the fake: classSizes up to 16 MiB (a
// huge block of eight chunks; bigger ones take the same paths), and in the long form
// (pinned.LongRun) 64, 128 and 256 MiB too.
func hugestCopy() int {
	if pinned.LongRun() {
		return 256 << 20
	}
	return 16 << 20
}

// TestFakePoolCopiesHostVMM copies every size class and huge sizes up to 16 MiB, 256 MiB in the
// long form (16 and 256 MiB among them: what TestCUDARegisteredBandwidth and BenchmarkCUDACopy
// copy on a GPU), from a CUDAHost pool over VMM host memory.
func TestFakePoolCopiesHostVMM(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 2 << 30})
	if st := p.Stats(); st.Provider != "cuda-host-vmm" || st.Granule != 2<<20 {
		t.Fatalf("CUDAHost on a driver with host VMM uses %q, granule %d", st.Provider, st.Granule)
	}
	copyEverything(t, f, p, hugestCopy())
	if f.Stat(fakecuda.Registrations) != 0 || f.Stat(fakecuda.PinnedCopies) == 0 {
		t.Errorf("registrations %d, pinned copies %d", f.Stat(fakecuda.Registrations), f.Stat(fakecuda.PinnedCopies))
	}
	closePool(t, f, p)
}

// TestFakePoolCopiesRegister is TestFakePoolCopiesHostVMM on a driver without VMM host memory:
// registered memory, every buffer inside one registration. The purge is off, so that the
// pool's committed memory and the fake's registered bytes are read at one state (a purge
// between the two reads, a pause of a purge delay on a loaded machine, failed it).
func TestFakePoolCopiesRegister(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 2 << 30, PurgeDelay: -1})
	if st := p.Stats(); st.Provider != "cuda-host-register" || st.Granule != 2<<20 {
		t.Fatalf("CUDAHost on a driver without host VMM uses %q, granule %d", st.Provider, st.Granule)
	}
	copyEverything(t, f, p, hugestCopy())
	st := p.Stats()
	if uint64(f.Stat(fakecuda.RegisteredBytes)) != st.Committed || f.Stat(fakecuda.HostVMMBytes) != 0 {
		t.Errorf("registered %d bytes, host VMM %d; pool committed %d", f.Stat(fakecuda.RegisteredBytes), f.Stat(fakecuda.HostVMMBytes), st.Committed)
	}
	closePool(t, f, p)
}

// TestFakePoolAlignments copies buffers at every alignment a pool offers (Options.Align, and
// AllocAligned beyond it), on both kinds of driver.
func TestFakePoolAlignments(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	c := newCopier(t, 8<<20)
	for _, hostVMM := range []bool{true, false} {
		f.SetHostVMM(hostVMM)
		for align := 16; align <= 32<<10; align *= 2 {
			p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, Align: align})
			var bufs [][]byte
			for _, n := range []int{1, 100, 5000, 40000, 300 << 10, 3 << 20} {
				b, err := p.Alloc(n)
				if err != nil || mem.Addr(b)%uintptr(align) != 0 {
					t.Fatalf("Alloc(%d) aligned to %d: %#x, %v", n, align, mem.Addr(b), err)
				}
				c.roundTrip(b)
				bufs = append(bufs, b)
			}
			for _, a := range []int{64 << 10, 1 << 20, 4 << 20} {
				b, err := p.AllocAligned(align+a/3, a)
				if err != nil || mem.Addr(b)%uintptr(a) != 0 {
					t.Fatalf("AllocAligned(%d, %d): %#x, %v", align+a/3, a, mem.Addr(b), err)
				}
				c.roundTrip(b)
				bufs = append(bufs, b)
			}
			for _, b := range bufs {
				if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := f.Stat(fakecuda.PageableCopies); n != 0 {
		t.Errorf("%d copies were pageable", n)
	}
}

// TestFakePoolRecommit decommits and recommits the pool's memory (Trim, and the purge timer)
// and copies buffers between the cycles, on both kinds of driver.
func TestFakePoolRecommit(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	c := newCopier(t, 9<<20)
	for _, hostVMM := range []bool{true, false} {
		f.SetHostVMM(hostVMM)
		p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, PurgeDelay: time.Millisecond})
		keep, err := p.Alloc(5000) // a live buffer in a segment whose neighbours come and go
		if err != nil {
			t.Fatal(err)
		}
		for cycle := 0; cycle < 4; cycle++ {
			var bufs [][]byte
			for _, n := range []int{600 << 10, 1 << 20, 5<<20 + 3, 9 << 20, 70000} {
				b, err := p.Alloc(n)
				if err != nil {
					t.Fatalf("cycle %d: Alloc(%d): %v", cycle, n, err)
				}
				c.roundTrip(b)
				bufs = append(bufs, b)
			}
			c.roundTrip(keep)
			for _, b := range bufs {
				if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			if cycle%2 == 0 {
				p.Trim()
			} else {
				time.Sleep(20 * time.Millisecond) // the purge timer decommits
			}
			c.roundTrip(keep)
		}
		st := p.Stats()
		if st.CommitBytes <= st.Committed {
			t.Errorf("host VMM %v: committed %d bytes in all, %d now: nothing was decommitted and recommitted", hostVMM, st.CommitBytes, st.Committed)
		}
		if err := p.Free(keep); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Stat(fakecuda.PageableCopies); n != 0 {
		t.Errorf("%d copies were pageable", n)
	}
}

func TestFakeAutoWithDriver(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	for _, hostVMM := range []bool{true, false} {
		f.SetHostVMM(hostVMM)
		p := newPool(t, pinned.Options{Backend: pinned.Auto, Capacity: 1 << 30, PurgeDelay: -1})
		want := map[bool]string{true: "cuda-host-vmm", false: "cuda-host-register"}[hostVMM]
		if st := p.Stats(); st.Backend != pinned.CUDAHost || st.Kind != "host-pinned" || st.Provider != want {
			t.Fatalf("Auto with a driver (host VMM %v) chose %q (%s, %s), want cuda-host (%s)", hostVMM, st.Backend, st.Kind, st.Provider, want)
		}
		var bufs [][]byte
		for _, n := range []int{64, 4 << 10, 300 << 10, 5 << 20} {
			b, err := p.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc(%d): %v", n, err)
			}
			b[0], b[n-1] = 1, 2
			if dp, err := p.DevicePointer(b); err != nil || dp != pcuda.DevicePtr(mem.Addr(b)) {
				t.Errorf("DevicePointer of a %d-byte buffer = %#x, %v", n, dp, err)
			}
			bufs = append(bufs, b)
		}
		st := p.Stats()
		pinnedBytes := f.Stat(fakecuda.HostVMMBytes)
		if !hostVMM {
			pinnedBytes = f.Stat(fakecuda.RegisteredBytes)
		}
		if uint64(pinnedBytes) != st.Committed || st.Locked != st.Committed || st.DriverObjects == 0 || st.DriverCalls == 0 {
			t.Errorf("host VMM %v: the driver pins %d bytes; pool committed %d, locked %d, driver objects %d",
				hostVMM, pinnedBytes, st.Committed, st.Locked, st.DriverObjects)
		}
		if st.CommitBytes != st.Committed || st.CommitPerGiB <= 0 {
			t.Errorf("commit time %v for %d bytes (%v per GiB)", st.CommitTime, st.CommitBytes, st.CommitPerGiB)
		}
		if !hostVMM && st.Syscalls == 0 {
			t.Errorf("no system calls counted for the mappings")
		}
		if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
			t.Errorf("Close with live buffers = %v", err)
		}
		for _, b := range bufs { // the last Free releases the memory and the device
			if err := p.Free(b); err != nil {
				t.Fatalf("Free: %v", err)
			}
		}
		if live := f.LiveObjects(); len(live) != 0 || cuda.PrimaryRetains() != 0 {
			t.Errorf("after the last Free of a closed pool: fake holds %v, %d retains", live, cuda.PrimaryRetains())
		}
	}
}

func TestFakePinnedHostBackend(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	if _, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: 1}); !errors.Is(err, pinmalloc.ErrNoDevice) {
		t.Errorf("CUDAHost on a device that does not exist = %v, want pinmalloc.ErrNoDevice", err)
	}
	p := newPool(t, pinned.Options{Backend: pinned.Auto, Device: 1, Capacity: 1 << 30})
	if b := p.Stats().Backend; b != pinned.Locked {
		t.Errorf("Auto without device 1 chose %q, want locked", b)
	}
	if _, err := p.DevicePointer(make([]byte, 1)); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("DevicePointer of a locked pool = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// A pin the driver refuses is an error that names the call and the memory, never pageable
	// memory in disguise.
	f.SetHostVMM(false)
	p = newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30})
	f.FailRegister(100, fakecuda.ResultOutOfMemory)
	_, err := p.Alloc(1 << 20)
	if !errors.Is(err, pinmalloc.ErrOutOfMemory) || !strings.Contains(err.Error(), "cuMemHostRegister of 2097152 bytes") || !strings.Contains(err.Error(), "bytes committed by this cuda-host-register provider") {
		t.Errorf("Alloc with registration refused = %v", err)
	}
	// Refused for another cause, it is ErrRefused, not out of memory (which a caller would
	// answer by freeing memory, or a tier by dropping copies for room).
	f.FailRegister(100, fakecuda.ResultNotPermitted)
	_, err = p.Alloc(1 << 20)
	if !errors.Is(err, pinned.ErrRefused) || errors.Is(err, pinmalloc.ErrOutOfMemory) || !strings.Contains(err.Error(), "cuMemHostRegister") {
		t.Errorf("Alloc with registration not permitted = %v, want pinned.ErrRefused naming the call, not out of memory", err)
	}
	f.FailRegister(0, 0)
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatalf("Alloc after a refusal: %v", err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	closePool(t, f, p)
}

// TestFakePrecommit commits memory ahead of need in the background, and checks that the
// buffers allocated afterwards need no new commit.
func TestFakePrecommit(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, Precommit: 64 << 20})
	if err := p.WaitPrecommit(); err != nil {
		t.Fatalf("WaitPrecommit: %v", err)
	}
	st := p.Stats()
	if st.Precommitted != 64<<20 || st.Committed != 64<<20 || st.Precommitting || st.PrecommitErr != nil {
		t.Fatalf("after precommit: %+v", st)
	}
	if uint64(f.Stat(fakecuda.HostVMMBytes)) != st.Committed {
		t.Errorf("host VMM bytes %d, committed %d", f.Stat(fakecuda.HostVMMBytes), st.Committed)
	}
	time.Sleep(30 * time.Millisecond) // longer than the purge delay: precommitted memory stays
	creates := f.Stat(fakecuda.CreateCalls)
	c := newCopier(t, 32<<20)
	var bufs [][]byte
	for _, n := range []int{4096, 100 << 10, 1 << 20, 32 << 20} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		c.roundTrip(b)
		bufs = append(bufs, b)
	}
	if n := f.Stat(fakecuda.CreateCalls); n != creates || p.Stats().Committed != 64<<20 {
		t.Errorf("buffers in precommitted memory made %d cuMemCreate calls; committed %d", n-creates, p.Stats().Committed)
	}
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	p.Trim()
	if st := p.Stats(); st.Committed != 0 {
		t.Errorf("Trim left %d bytes committed", st.Committed)
	}
	closePool(t, f, p)
	if _, err := pinned.New(pinned.Options{Precommit: -1}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("a negative precommit = %v", err)
	}
}

// TestFakePrecommitDoesNotBlock starts a big precommit and allocates at once: the allocation
// is served while the background commit goes on.
func TestFakePrecommitDoesNotBlock(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 4 << 30, Precommit: 2 << 30})
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("first Alloc served with %d MiB precommitted, running %v", st.Precommitted>>20, st.Precommitting)
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	// Close waits for the chunk being committed, then the precommit stops.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitPrecommit(); err != nil {
		t.Errorf("WaitPrecommit after Close = %v", err)
	}
	if live := f.LiveObjects(); len(live) != 0 {
		t.Errorf("after Close: fake holds %v", live)
	}
}

func TestAutoWithoutDriver(t *testing.T) {
	if !fakecuda.RunWithoutDriver(t) {
		return
	}
	p, err := pinned.New(pinned.Options{Backend: pinned.Auto, Capacity: 1 << 30})
	if err != nil {
		t.Fatalf("New(Auto): %v", err)
	}
	if b := p.Stats().Backend; b != pinned.Locked {
		t.Errorf("Auto without a driver chose %q, want locked", b)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost}); !errors.Is(err, pinmalloc.ErrNoDriver) || !errors.Is(err, pinned.ErrNoDriver) {
		t.Errorf("CUDAHost without a driver = %v, want ErrNoDriver", err)
	}
}

var _ = fmt.Sprint
