package pinned_test

// The CUDAHost and Auto backends against the fake driver of internal/fakecuda (each test runs in
// a child process that loads it, or that can load no driver at all).

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func TestFakeAutoWithDriver(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	p, err := pinned.New(pinned.Options{Backend: pinned.Auto, Capacity: 1 << 30, PurgeDelay: -1})
	if err != nil {
		t.Fatalf("New(Auto): %v", err)
	}
	if st := p.Stats(); st.Backend != "cuda-host" || st.Kind != "host-pinned" {
		t.Fatalf("Auto with a driver chose %q (%s), want cuda-host", st.Backend, st.Kind)
	}
	var bufs [][]byte
	for _, n := range []int{64, 4 << 10, 300 << 10, 5 << 20} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		b[0], b[n-1] = 1, 2
		if dp, err := p.DevicePointer(b); err != nil || dp != mem.Addr(b) {
			t.Errorf("DevicePointer of a %d-byte buffer = %#x, %v", n, dp, err)
		}
		bufs = append(bufs, b)
	}
	st := p.Stats()
	if f.Stat(fakecuda.Registrations) == 0 || uint64(f.Stat(fakecuda.RegisteredBytes)) != st.Committed || st.Locked != st.Committed {
		t.Errorf("registered %d bytes in %d ranges; pool committed %d, locked %d",
			f.Stat(fakecuda.RegisteredBytes), f.Stat(fakecuda.Registrations), st.Committed, st.Locked)
	}
	if st.Syscalls == 0 {
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

func TestFakePinnedHostBackend(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	if _, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: 1}); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("CUDAHost on a device that does not exist = %v, want cuda.ErrNoDevice", err)
	}
	p, err := pinned.New(pinned.Options{Backend: pinned.Auto, Device: 1, Capacity: 1 << 30})
	if err != nil {
		t.Fatalf("New(Auto, device 1): %v", err)
	}
	if b := p.Stats().Backend; b != "locked" {
		t.Errorf("Auto without device 1 chose %q, want locked", b)
	}
	if _, err := p.DevicePointer(make([]byte, 1)); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("DevicePointer of a locked pool = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p, err = pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30})
	if err != nil {
		t.Fatalf("New(CUDAHost): %v", err)
	}
	f.FailRegister(100, fakecuda.ResultOutOfMemory) // the heap retries a failed commit once
	if _, err := p.Alloc(1 << 20); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("Alloc with registration refused = %v", err)
	}
	f.FailRegister(0, 0)
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatalf("Alloc after a refusal: %v", err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if live := f.LiveObjects(); len(live) != 0 || cuda.PrimaryRetains() != 0 {
		t.Errorf("after Close: fake holds %v, %d retains", live, cuda.PrimaryRetains())
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
	if b := p.Stats().Backend; b != "locked" {
		t.Errorf("Auto without a driver chose %q, want locked", b)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("CUDAHost without a driver = %v, want cuda.ErrNoDriver", err)
	}
}
