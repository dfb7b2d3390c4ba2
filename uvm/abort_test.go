package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// partMover queues the first of the copies it is given with another mover, then fails, as a
// per-copy mover whose driver refuses a copy midway does.
// With fault set, a kernel faults after that first copy is queued (fault makes it so).
type partMover struct {
	next  uvm.Mover
	fail  bool
	fault func()
}

func (m *partMover) Copy(jobs []uvm.CopyJob, s cuda.Stream) error {
	if !m.fail {
		return m.next.Copy(jobs, s)
	}
	m.fail = false
	if err := m.next.Copy(jobs[:1], s); err != nil {
		return err
	}
	if m.fault != nil {
		m.fault()
	}
	return errors.New("injected: the second copy is refused")
}

// abortBlock is the size of dirtyOnFullPool's block.
const abortBlock = 64 * kib

// dirtyOnFullPool makes a tier whose copies go through a partMover and whose host pool has a
// quota of one block of abortBlock bytes, and a block a on the device, dirty (written on stream
// s with pattern(1), no host copy), with s synchronized. The pool has one shard, so that the
// buffer a Free gives back is the next Alloc's whatever P the test runs on.
func dirtyOnFullPool(t *testing.T, dev *icuda.Device) (tr *uvm.Tier, m *partMover, a uvm.Handle, s cuda.Stream) {
	t.Helper()
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, Quota: abortBlock, PurgeDelay: -1, Shards: 1})
	must(t, err)
	t.Cleanup(func() { must(t, pool.Close()) }) // after the tier's Close, registered later
	m = &partMover{next: kernelMover(t, dev)}
	tr = newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostPool: pool, Mover: m})
	s = stream(t, dev)
	a, err = tr.Alloc(abortBlock)
	must(t, err)
	p, err := tr.Acquire(a, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(1, abortBlock))
	must(t, tr.Release(a, s))
	must(t, dev.StreamSynchronize(uintptr(s)))
	return tr, m, a, s
}

// TestAbortedEvictionWaitsForItsCopies: an eviction whose Mover queued a copy into a block's new
// host buffer and then failed leaves the block where it was, keeping the buffer; when the host
// pool is full, the next host buffer is that one (dropHostCopies takes the block's, which is not
// valid). The aborted eviction waited for its copies only when a launch had succeeded before,
// so the copy still queued landed in the next block's bytes after Go wrote them.
func TestAbortedEvictionWaitsForItsCopies(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = abortBlock
	tr, m, a, _ := dirtyOnFullPool(t, dev)

	f.Hold(true) // the copy the eviction queues stays queued
	defer f.Hold(false)
	m.fail = true
	if err := tr.Evict([]uvm.Handle{a}); err == nil {
		t.Fatal("an eviction whose Mover failed succeeded")
	}
	nextBlockKeepsBytes(t, f, tr, a, n)
}

// TestAbortedEvictionAfterFaultHoldsBuffers: when the wait of an aborted eviction for its copies
// fails too (a kernel faulted after the first copy was queued: the context's sticky error), the
// block lets go of the host buffer that copy may still write, and the tier holds it back: the
// next block gets no buffer from it (the pool is full) until the device synchronizes.
func TestAbortedEvictionAfterFaultHoldsBuffers(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = abortBlock
	tr, m, a, s := dirtyOnFullPool(t, dev)

	m.fail, m.fault = true, func() { f.Fault(t, dev) }
	if err := tr.Evict([]uvm.Handle{a}); !strings.Contains(fmt.Sprint(err), "holds back 1 host buffer") {
		t.Fatalf("an eviction aborted after a fault: %v; want it to say the block's host buffer is held back", err)
	}
	if st := tr.Stats(); st.HeldBackHostBytes != n || st.HostHeldBytes != 0 || st.DeviceBytes != n {
		t.Fatalf("after the aborted eviction: %d bytes of host buffers held back, %d held by blocks, %d on the device; want %d, 0, %d",
			st.HeldBackHostBytes, st.HostHeldBytes, st.DeviceBytes, n, n)
	}
	must(t, tr.Verify())
	b, err := tr.Alloc(n)
	must(t, err)
	if _, err := tr.AcquireHost(b, uvm.Write); !errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("AcquireHost with the pool's one buffer held back: %v; want uvm.ErrHostFull", err)
	}

	f.ClearStickyError()
	must(t, tr.Sync())
	buf, err := tr.AcquireHost(b, uvm.Write)
	must(t, err)
	copy(buf, pattern(2, n))
	must(t, tr.ReleaseHost(b))
	must(t, tr.Free(b))
	q, err := tr.Acquire(a, s, uvm.Read)
	must(t, err)
	must(t, tr.Release(a, s))
	if got := readDev(t, dev, s, q, n); !bytes.Equal(got, pattern(1, n)) {
		t.Fatalf("the block whose eviction was aborted: %#x at 0, want %#x", got[0], pattern(1, n)[0])
	}
	must(t, tr.Free(a))
}

// TestFailedHostCopyWaitsForIt: AcquireHost of a dirty block copies its device bytes to a new
// host buffer; when the Mover queued that copy and then failed, the block kept the buffer with
// the copy still queued, and with the host pool full the next block was given it
// (dropHostCopies): the copy landed on the bytes Go wrote there.
func TestFailedHostCopyWaitsForIt(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = abortBlock
	tr, m, a, _ := dirtyOnFullPool(t, dev)

	f.Hold(true) // the copy stays queued
	defer f.Hold(false)
	m.fail = true
	if _, err := tr.AcquireHost(a, uvm.Read); err == nil {
		t.Fatal("AcquireHost whose copy the Mover failed succeeded")
	}
	nextBlockKeepsBytes(t, f, tr, a, n)
}

// nextBlockKeepsBytes allocates a block of n bytes on tr's full pool, which takes the host
// buffer a's failed copy was queued into, writes it, lets the fake run the queued work and
// checks that the block kept its bytes; then frees both blocks.
func nextBlockKeepsBytes(t *testing.T, f *fakecuda.Driver, tr *uvm.Tier, a uvm.Handle, n int) {
	t.Helper()
	b, err := tr.Alloc(n)
	must(t, err)
	buf, err := tr.AcquireHost(b, uvm.Write) // the pool is full: a's host buffer is dropped for it
	must(t, err)
	want := pattern(2, n)
	copy(buf, want)
	must(t, tr.ReleaseHost(b))
	f.Complete()
	got, err := tr.AcquireHost(b, uvm.Read)
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("the next block's host bytes changed once the streams ran: %#x at 0, want %#x (the first block's are %#x)", got[0], want[0], pattern(1, n)[0])
	}
	must(t, tr.ReleaseHost(b))
	if st := tr.Stats(); st.HostCopiesDropped != 1 {
		t.Fatalf("%d host copies dropped, want 1 (the test's premise)", st.HostCopiesDropped)
	}
	must(t, tr.Free(a))
	must(t, tr.Free(b))
}

// TestAbortedRestoreFreeWaitsForItsCopies: a restore whose Mover queued a copy from a block's
// host buffer and then failed leaves the block on the host, the copy still queued; the Free of
// the block gave the buffer back to the pool at once, under that copy, and a pool that
// decommits its free memory (Trim) unmapped it: the copy faulted when it ran (a sticky error,
// the context lost).
func TestAbortedRestoreFreeWaitsForItsCopies(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = abortBlock
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, PurgeDelay: -1, Shards: 1})
	must(t, err)
	t.Cleanup(func() { must(t, pool.Close()) }) // after the tier's Close, registered later
	m := &partMover{next: kernelMover(t, dev)}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostPool: pool, Mover: m})
	s := stream(t, dev)
	a, err := tr.Alloc(n)
	must(t, err)
	p, err := tr.Acquire(a, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(1, n))
	must(t, tr.Release(a, s))
	must(t, tr.Evict([]uvm.Handle{a}))
	must(t, tr.Sync())

	f.Hold(true) // the restore's copy stays queued
	defer f.Hold(false)
	m.fail = true
	if _, err := tr.Acquire(a, s, uvm.Read); err == nil {
		t.Fatal("an Acquire whose restore the Mover failed succeeded")
	}
	must(t, tr.Free(a))
	must(t, pool.Trim()) // decommits what is free in the pool
	f.Hold(false)
	if err := tr.Sync(); err != nil {
		t.Fatalf("Sync after the Free of a block whose restore was aborted: %v", err)
	}
	if code := f.StickyError(); code != 0 {
		t.Fatalf("the aborted restore's copy faulted (%d): its host buffer went back to the pool under it", code)
	}
	if st := pool.Stats(); st.Live != 0 {
		t.Fatalf("%d buffers live in the pool after Sync, want 0", st.Live)
	}
}
