package uvm_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Changes of owner in stream order, one test each: memory a block gives up (its host buffer,
// its VRAM) goes to the next block only after every copy and every use of the user's that may
// still touch it has run. The fake holds the work (Hold) so that the old owner's copy runs after
// the new owner's, where the order is missing: each test fails on a tier that hands the memory
// over early (checked by mutating the tier: freeing a host buffer under its eviction, freeing
// VRAM without the release events of a block acquired at Free or dropped for a host write,
// dropping a host copy a restore still reads).

// TestFreeAfterEvict: a block freed while its eviction's copy into its host buffer is queued
// keeps that buffer until the copy has run; the next block that takes a buffer keeps its bytes.
func TestFreeAfterEvict(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 1 << 20 // a buffer of a page of its own: the next Alloc of its size takes it
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s := stream(t, dev)
	a := allocN(t, tr, 1, size)[0]
	p, err := tr.Acquire(a, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(1, size))
	must(t, tr.Release(a, s))
	f.Hold(true)
	defer f.Hold(false)
	must(t, tr.Evict([]uvm.Handle{a})) // its copy to the host waits, held
	must(t, tr.Free(a))
	next := allocN(t, tr, 4, size) // host buffers at once
	for i, h := range next {
		buf, err := tr.AcquireHost(h, uvm.Write)
		must(t, err)
		copy(buf, pattern(byte(2+i), size))
		must(t, tr.ReleaseHost(h))
	}
	f.Hold(false)
	f.Complete()
	for i, h := range next {
		buf, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(buf, pattern(byte(2+i), size)) {
			t.Errorf("block %d: the freed block's eviction wrote the next block's host buffer", i)
		}
		must(t, tr.ReleaseHost(h))
	}
}

// TestFreeAcquiredOrdersItsWork: a block freed while acquired, with its writes still queued
// on the user's stream, gives its VRAM to the next block only after that stream has passed
// them.
func TestFreeAcquiredOrdersItsWork(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s1, s2 := stream(t, dev), stream(t, dev)
	a := allocN(t, tr, 1, size)[0]
	pa, err := tr.Acquire(a, s1, uvm.Write)
	must(t, err)
	f.Hold(true)
	writeDev(t, dev, s1, pa, pattern(1, size)) // queued on s1, not run
	must(t, tr.Free(a))                        // acquired: the use ends now
	f.Hold(false)
	b, pb := nextOnVRAM(t, tr, s2, pa, size) // a's VRAM, once its completion is polled
	writeDev(t, dev, s2, pb, pattern(2, size))
	must(t, dev.StreamSynchronize(uintptr(s2))) // the next block's write runs first,
	must(t, dev.StreamSynchronize(uintptr(s1))) // then whatever s1 still held
	if !bytes.Equal(readDev(t, dev, s2, pb, size), pattern(2, size)) {
		t.Error("a write queued on the freed block's stream landed in the next block's VRAM")
	}
	must(t, tr.Release(b, s2))
}

// TestHostWriteOrdersDeviceReads: AcquireHost for writing drops the device copy of a block on
// the device; its VRAM goes to the next block only after the user's stream has passed the reads
// queued there before the block's Release.
func TestHostWriteOrdersDeviceReads(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s1, s2 := stream(t, dev), stream(t, dev)
	a := filled(t, tr, 1, size)[0] // pattern(0), on the host
	pa, err := tr.Acquire(a, s1, uvm.Read)
	must(t, err)
	must(t, tr.Sync())
	out, err := dev.MemHostAlloc(size, 0) // where s1's read of the block lands
	must(t, err)
	defer func() { must(t, dev.MemFreeHost(out)) }()
	f.Hold(true)
	must(t, dev.MemcpyDtoHAsync(out, uintptr(pa), size, uintptr(s1))) // queued, not run
	must(t, tr.Release(a, s1))
	buf, err := tr.AcquireHost(a, uvm.Write) // a is clean: its device copy is dropped
	must(t, err)
	copy(buf, pattern(9, size))
	must(t, tr.ReleaseHost(a))
	f.Hold(false)
	b, pb := nextOnVRAM(t, tr, s2, pa, size)
	writeDev(t, dev, s2, pb, pattern(2, size))
	_ = readDev(t, dev, s2, pb, size) // s2 runs
	must(t, dev.StreamSynchronize(uintptr(s1)))
	if !bytes.Equal(mem.Bytes(out, size), pattern(0, size)) {
		t.Error("a read queued on the user's stream before Release read the next block's bytes")
	}
	must(t, tr.Release(b, s2))
}

// TestDropHostCopyWaitsForRestore: at the host pool's quota, an eviction that needs a host
// buffer drops the host copies of clean blocks on the device, but not one that a restore still
// reads: the restored block keeps its bytes.
func TestDropHostCopyWaitsForRestore(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 1 << 20 // a buffer of a page of its own: the next Alloc of its size takes it
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, Quota: 2 * size, PurgeDelay: -1, Shards: 1})
	must(t, err)
	defer func() { must(t, pool.Close()) }()
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 2 * size, HostPool: pool})
	must(t, err)
	defer func() { must(t, tr.Close()) }()
	s, s2 := stream(t, dev), stream(t, dev) // A's stream, C's: the eviction does not wait for s
	hs := filled(t, tr, 2, size)            // A and D on the host: the quota is full
	a := hs[0]
	f.Hold(true)
	defer f.Hold(false)
	must(t, tr.Prefetch([]uvm.Handle{a}, s)) // A's restore reads its host copy, held
	c := allocN(t, tr, 1, size)[0]
	pc, err := tr.Acquire(c, s2, uvm.Write)
	must(t, err)
	writeDev(t, dev, s2, pc, pattern(3, size))
	must(t, tr.Release(c, s2))
	if err := tr.Evict([]uvm.Handle{c}); err != nil && !errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("Evict at the quota: %v", err)
	}
	if buf, err := tr.AcquireHost(c, uvm.Read); err == nil { // its eviction's copy runs
		must(t, tr.ReleaseHost(c))
		if !bytes.Equal(buf, pattern(3, size)) {
			t.Error("the evicted block's host bytes differ")
		}
	}
	pa, err := tr.Acquire(a, s, uvm.Read)
	must(t, err)
	if !bytes.Equal(readDev(t, dev, s, pa, size), pattern(0, size)) {
		t.Error("the restore read a host copy dropped under it and given to another block")
	}
	must(t, tr.Release(a, s))
}

// nextOnVRAM makes a block of size bytes and acquires it for writing on s, where it must get the
// VRAM at pa that an earlier block gave up: the tests of a change of owner need the reuse.
func nextOnVRAM(t *testing.T, tr *uvm.Tier, s cuda.Stream, pa cuda.DevicePtr, size int) (uvm.Handle, cuda.DevicePtr) {
	t.Helper()
	b := allocN(t, tr, 1, size)[0]
	pb, err := tr.Acquire(b, s, uvm.Write)
	must(t, err)
	if pb != pa {
		t.Fatalf("the next block got %#x, not the VRAM %#x given up: the test needs the reuse", pb, pa)
	}
	return b, pb
}

// TestAcquireOnAnotherStreamWaitsForRelease: a block written on s1 and released, then acquired
// on s2 while it stays on the device, makes s2 wait for s1's release: a read queued on s2 sees
// what s1 wrote, though s1's write is still queued when s2 acquires. Acquiring on s2 again
// makes no further wait. Before, s2 waited for s1 only where the block had been evicted and
// brought back in between, so the read found the old bytes.
func TestAcquireOnAnotherStreamWaitsForRelease(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s1, s2 := stream(t, dev), stream(t, dev)
	h := filled(t, tr, 1, size)[0]
	p1, err := tr.Acquire(h, s1, uvm.Write)
	must(t, err)
	must(t, tr.Sync()) // the block's bytes are on the device
	f.Hold(true)
	defer f.Hold(false)
	writeDev(t, dev, s1, p1, pattern(9, size)) // queued on s1, not run
	must(t, tr.Release(h, s1))
	p2, err := tr.Acquire(h, s2, uvm.Read)
	must(t, err)
	if p2 != p1 {
		t.Fatalf("the block moved (%#x -> %#x): it should have stayed on the device", p1, p2)
	}
	if got := readDev(t, dev, s2, p2, size); !bytes.Equal(got, pattern(9, size)) { // runs s2, and what it waits for
		t.Errorf("a read on s2 after Acquire there found the bytes before s1's released write (byte 0 %#x, want %#x)", got[0], pattern(9, size)[0])
	}
	must(t, tr.Release(h, s2))
	waits := f.Stat(fakecuda.StreamWaits)
	_, err = tr.Acquire(h, s2, uvm.Read)
	must(t, err)
	if n := f.Stat(fakecuda.StreamWaits) - waits; n != 0 {
		t.Errorf("acquiring again on the stream that waited made %d stream waits, want 0", n)
	}
	must(t, tr.Release(h, s2))
}
