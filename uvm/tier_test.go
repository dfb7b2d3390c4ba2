package uvm_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	ipattern "github.com/pinmalloc/pinmalloc/internal/pattern"
	"github.com/pinmalloc/pinmalloc/internal/probe"
	"github.com/pinmalloc/pinmalloc/uvm"
)

const kib = 1 << 10

// newTier makes a tier on dev, closed (and checked for leaks) at cleanup.
// public is d, a device opened through the binding (fakecuda), as the public API takes it.
func public(d *icuda.Device) *cuda.Device { return icuda.Wrap[*cuda.Device](d) }

func newTier(t testing.TB, dev *icuda.Device, o uvm.Options) *uvm.Tier {
	t.Helper()
	tr, err := uvm.New(public(dev), o)
	if err != nil {
		t.Fatalf("uvm.New: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil && !errors.Is(err, uvm.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// stream makes a stream, destroyed at cleanup (after the tier's Close, registered earlier).
func stream(t testing.TB, dev *icuda.Device) cuda.Stream {
	t.Helper()
	s, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.StreamDestroy(s); err != nil {
			t.Errorf("StreamDestroy: %v", err)
		}
	})
	return cuda.Stream(s)
}

// readDev copies n bytes of device memory at p into a new Go slice, on stream s, the stream
// the block is acquired on: work queued on s sees the tier's copies, where the legacy stream
// (a synchronous copy) does not wait for them.
func readDev(t testing.TB, dev *icuda.Device, s cuda.Stream, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	var pin runtime.Pinner
	pin.Pin(&b[0])
	defer pin.Unpin()
	if err := dev.MemcpyDtoHAsync(mem.Addr(b), uintptr(p), uintptr(n), uintptr(s)); err != nil {
		t.Fatalf("MemcpyDtoHAsync: %v", err)
	}
	if err := dev.StreamSynchronize(uintptr(s)); err != nil {
		t.Fatalf("StreamSynchronize: %v", err)
	}
	return b
}

// writeDev writes b to device memory at p, as a kernel on the acquiring stream s would: queued
// on s (b is staged by the driver at the call), so a Release on s orders it before the block
// moves.
func writeDev(t testing.TB, dev *icuda.Device, s cuda.Stream, p cuda.DevicePtr, b []byte) {
	t.Helper()
	var pin runtime.Pinner
	pin.Pin(&b[0])
	defer pin.Unpin()
	if err := dev.MemcpyHtoDAsync(uintptr(p), mem.Addr(b), uintptr(len(b)), uintptr(s)); err != nil {
		t.Fatalf("MemcpyHtoDAsync: %v", err)
	}
}

// allocN allocates n blocks of size bytes.
func allocN(t testing.TB, tr *uvm.Tier, n, size int) []uvm.Handle {
	t.Helper()
	hs := make([]uvm.Handle, n)
	for i := range hs {
		h, err := tr.Alloc(size)
		must(t, err)
		hs[i] = h
	}
	return hs
}

// filled allocates n blocks of size bytes and fills block i from the host with pattern(i).
func filled(t testing.TB, tr *uvm.Tier, n, size int) []uvm.Handle {
	t.Helper()
	hs := allocN(t, tr, n, size)
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Write)
		must(t, err)
		copy(b, pattern(byte(i), size))
		must(t, tr.ReleaseHost(h))
	}
	return hs
}

// acquireAll acquires each block of hs on stream s in mode m and releases it there at once: the
// blocks are on the device, and their device addresses are returned.
func acquireAll(t testing.TB, tr *uvm.Tier, s cuda.Stream, m uvm.Mode, hs []uvm.Handle) []cuda.DevicePtr {
	t.Helper()
	ps := make([]cuda.DevicePtr, len(hs))
	for i, h := range hs {
		p, err := tr.Acquire(h, s, m)
		must(t, err)
		must(t, tr.Release(h, s))
		ps[i] = p
	}
	return ps
}

// pattern returns n bytes of seed's pattern, seed + 7i + i/251 at byte i. It repeats every
// patternPeriod bytes, so the first period is computed and doubled by copies: a byte loop over
// the megabytes TestBlockSizes moves was most of its time.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	ipattern.Fill(b, patternPeriod, func(i int) byte { return seed + byte(i*7+i/251) })
	return b
}

// patternPeriod is the period of pattern: 256*251 bytes, after which 7i and i/251 have both
// grown by a multiple of 256.
const patternPeriod = 256 * 251

func must(t testing.TB, err error) {
	t.Helper()
	probe.Pause()
	if err != nil {
		t.Fatal(err)
	}
}

// checkAccounts checks the byte invariant of Stats.
func checkAccounts(t testing.TB, st uvm.Stats) {
	t.Helper()
	probe.Pause()
	if st.DeviceBytes+st.HostBytes+st.FreshBytes != st.LiveBytes {
		t.Fatalf("device %d + host %d + fresh %d != live %d", st.DeviceBytes, st.HostBytes, st.FreshBytes, st.LiveBytes)
	}
	if st.DeviceBytes > st.Budget {
		t.Fatalf("device bytes %d over the budget %d", st.DeviceBytes, st.Budget)
	}
	if st.SpareBytes > 2*st.Budget {
		t.Fatalf("spare VRAM %d over twice the budget %d", st.SpareBytes, st.Budget)
	}
}

// TestRoundTrip fills 8 blocks from the host through a tier whose budget holds 4, reads them
// on the device, rewrites them there, and reads them back on the host.
func TestRoundTrip(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n, size = 8, 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s := stream(t, dev)
	hs := filled(t, tr, n, size)
	for round := 0; round < 3; round++ {
		for i, h := range hs {
			p, err := tr.Acquire(h, s, uvm.Write)
			must(t, err)
			want := pattern(byte(i+round), size)
			if got := readDev(t, dev, s, p, size); !bytes.Equal(got, want) {
				t.Fatalf("round %d block %d: device bytes differ", round, i)
			}
			writeDev(t, dev, s, p, pattern(byte(i+round+1), size))
			must(t, tr.Release(h, s))
			checkAccounts(t, tr.Stats())
		}
	}
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(b, pattern(byte(i+3), size)) {
			t.Fatalf("block %d: host bytes differ", i)
		}
		must(t, tr.ReleaseHost(h))
	}
	st := tr.Stats()
	checkAccounts(t, st)
	if st.Misses == 0 || st.Out[uvm.CausePressure].Blocks == 0 || st.In[uvm.CauseAcquire].Blocks != st.Misses {
		t.Errorf("stats: %+v", st)
	}
	for _, h := range hs {
		must(t, tr.Free(h))
	}
	must(t, tr.Sync())
	if st := tr.Stats(); st.LiveBytes != 0 || st.Blocks != 0 || st.Pending != 0 || st.HostHeldBytes != 0 {
		t.Errorf("after freeing everything: %+v", st)
	}
}

// TestBadInput checks every misuse gets its sentinel and changes nothing.
func TestBadInput(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s1, s2 := stream(t, dev), stream(t, dev)
	if _, err := uvm.New(public(dev), uvm.Options{}); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Errorf("New without a budget: %v", err)
	}
	if _, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 1 << 20, HostPrecommit: 2 << 20}); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Errorf("New with HostPrecommit above HostCapacity: %v", err)
	}
	// Absurd sizes: the default HostCapacity (4x the budget) and the heap's room wrapped
	// around, and the error named a negative HostCapacity or capacity the caller never gave.
	for _, o := range []uvm.Options{{DeviceBudget: math.MaxInt / 2}, {DeviceBudget: math.MaxInt},
		{DeviceBudget: 1 << 20, HostCapacity: math.MaxInt}} {
		_, err := uvm.New(public(dev), o)
		if !errors.Is(err, uvm.ErrInvalidOptions) || !strings.Contains(err.Error(), "at most 128 TiB") {
			t.Errorf("New with DeviceBudget %d, HostCapacity %d: %v, want ErrInvalidOptions naming the limit",
				o.DeviceBudget, o.HostCapacity, err)
		}
	}
	if _, err := tr.Alloc(0); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Errorf("Alloc(0): %v", err)
	}
	if _, err := tr.Alloc(512 * kib); !errors.Is(err, uvm.ErrTooLarge) {
		t.Errorf("Alloc over the budget: %v", err)
	}
	h, err := tr.Alloc(64 * kib)
	must(t, err)
	if err := tr.Release(h, s1); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("Release without Acquire: %v", err)
	}
	if err := tr.ReleaseHost(h); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("ReleaseHost without AcquireHost: %v", err)
	}
	if _, err := tr.Acquire(h, s1, uvm.Mode(7)); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Errorf("Acquire with a bad mode: %v", err)
	}
	if _, err := tr.Acquire(h, 0xdead, uvm.Read); err == nil {
		t.Errorf("Acquire on a stream the driver does not know succeeded")
	}
	_, err = tr.Acquire(h, s1, uvm.Write)
	must(t, err)
	if err := tr.Release(h, s2); !errors.Is(err, uvm.ErrWrongStream) {
		t.Errorf("Release on the wrong stream: %v", err)
	}
	if err := tr.Evict([]uvm.Handle{h}); !errors.Is(err, uvm.ErrAcquired) {
		t.Errorf("Evict of an acquired block: %v", err)
	}
	if _, err := tr.AcquireHost(h, uvm.Read); !errors.Is(err, uvm.ErrAcquired) {
		t.Errorf("AcquireHost of a block acquired on the device: %v", err)
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrAcquired) {
		t.Errorf("Close with a block acquired: %v", err)
	}
	must(t, tr.Release(h, s1))
	if err := tr.Release(h, s1); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("a second Release: %v", err)
	}
	b, err := tr.AcquireHost(h, uvm.Write)
	must(t, err)
	if len(b) != 64*kib {
		t.Errorf("AcquireHost gave %d bytes, want %d", len(b), 64*kib)
	}
	if _, err := tr.Acquire(h, s1, uvm.Read); !errors.Is(err, uvm.ErrAcquired) {
		t.Errorf("Acquire of a block the host writes: %v", err)
	}
	must(t, tr.ReleaseHost(h))
	must(t, tr.Free(h))
	for name, err := range map[string]error{
		"Free":    tr.Free(h),
		"Release": tr.Release(h, s1),
		"Evict":   tr.Evict([]uvm.Handle{h}),
		"Acquire": func() error { _, err := tr.Acquire(h, s1, uvm.Read); return err }(),
		"Host":    func() error { _, err := tr.AcquireHost(h, uvm.Read); return err }(),
		"Zero":    func() error { _, err := tr.Acquire(0, s1, uvm.Read); return err }(),
	} {
		if !errors.Is(err, uvm.ErrInvalidHandle) {
			t.Errorf("%s of a freed handle: %v", name, err)
		}
	}
	h2, err := tr.Alloc(64 * kib) // reuses the slot with a new generation
	must(t, err)
	if h2 == h {
		t.Error("a new block got the freed handle")
	}
	if s, s2 := h.String(), h2.String(); s2 == s || !strings.HasPrefix(s, "uvm block ") || s[:len("uvm block 0")] != s2[:len("uvm block 0")] {
		t.Errorf("the freed handle prints %q, the slot's new one %q: want the same slot, another generation", s, s2)
	}
	if s := uvm.Handle(0).String(); s != "uvm block <none>" {
		t.Errorf("the zero Handle prints %q", s)
	}
	// A Prefetch refused for a bad handle leaves the good ones as they were: the next
	// Prefetch brings them (and Evict takes them off again).
	if err := tr.Prefetch([]uvm.Handle{h2, h}, s1); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Errorf("Prefetch with a freed handle: %v", err)
	}
	must(t, tr.Prefetch([]uvm.Handle{h2}, s1))
	if st := tr.Stats(); st.DeviceBytes != 64*kib {
		t.Errorf("after a Prefetch refused and one done, %d device bytes, want %d", st.DeviceBytes, 64*kib)
	}
	if err := tr.Evict([]uvm.Handle{h2, h}); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Errorf("Evict with a freed handle: %v", err)
	}
	must(t, tr.Evict([]uvm.Handle{h2}))
	if st := tr.Stats(); st.DeviceBytes != 0 {
		t.Errorf("after an Evict refused and one done, %d device bytes, want 0", st.DeviceBytes)
	}
	must(t, tr.Free(h2))
	must(t, tr.Close())
	if _, err := tr.Alloc(1); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
}

// pinnedSize is the size of budgetPinned's blocks.
const pinnedSize = 64 * kib

// budgetPinned returns a tier whose budget is two blocks of pinnedSize, both acquired for
// writing on stream s, and three blocks: the two acquired and one more. It returns a nil tier
// when there is no driver (the test is skipped).
func budgetPinned(t *testing.T) (*uvm.Tier, cuda.Stream, []uvm.Handle) {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil, 0, nil
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 2 * pinnedSize})
	s := stream(t, dev)
	hs := allocN(t, tr, 3, pinnedSize)
	for _, h := range hs[:2] {
		_, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
	}
	return tr, s, hs
}

// TestAllPinned fills the budget with acquired blocks: Acquire of another fails with
// ErrAllPinned, AcquireContext waits until a Release makes room.
func TestAllPinned(t *testing.T) {
	tr, s, hs := budgetPinned(t)
	if tr == nil {
		return
	}
	const size = pinnedSize
	if _, err := tr.Acquire(hs[2], s, uvm.Write); !errors.Is(err, uvm.ErrAllPinned) {
		t.Fatalf("Acquire with the budget pinned: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := tr.AcquireContext(ctx, hs[2], s, uvm.Write)
	cancel()
	if !errors.Is(err, uvm.ErrAllPinned) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireContext timing out: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.AcquireContext(context.Background(), hs[2], s, uvm.Write)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	must(t, tr.Release(hs[0], s))
	must(t, <-done)
	if st := tr.Stats(); st.AcquiredBlocks != 2 || st.DeviceBytes != 2*size {
		t.Errorf("after the wait: %+v", st)
	}
	must(t, tr.Release(hs[1], s))
	must(t, tr.Release(hs[2], s))
	for _, h := range hs {
		must(t, tr.Free(h))
	}
}

// TestLateBadHandle checks that Prefetch and Evict, which look at their handles a chunk at a
// time and queue the copies of the first chunks before they reach the last, move no block when
// a late handle is bad, and that Prefetch refuses more bytes than the budget the same way.
func TestLateBadHandle(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, n = 256, 600 // several chunks (128, 256, 512 handles)
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, n, size)
	must(t, tr.Evict(hs))
	gone, err := tr.Alloc(size)
	must(t, err)
	must(t, tr.Free(gone))
	before := tr.Stats()
	checkAccounts(t, before)
	if err := tr.Prefetch(append(hs[:n:n], gone), s); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Fatalf("Prefetch with a freed handle last: %v", err)
	}
	st := tr.Stats()
	checkAccounts(t, st)
	if st.DeviceBytes != before.DeviceBytes || st.Moved(true) != before.Moved(true) {
		t.Fatalf("a refused Prefetch moved blocks: device bytes %d -> %d, in %+v -> %+v",
			before.DeviceBytes, st.DeviceBytes, before.Moved(true), st.Moved(true))
	}
	must(t, tr.Prefetch(hs, s))
	if st := tr.Stats(); st.DeviceBytes != n*size {
		t.Fatalf("after the Prefetch, %d device bytes, want %d", st.DeviceBytes, n*size)
	}
	p, err := tr.Acquire(hs[n-1], s, uvm.Read)
	must(t, err)
	if !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(len(hs)-1), size)) {
		t.Fatal("the last block's bytes differ after the Prefetch")
	}
	before = tr.Stats()
	if err := tr.Evict(hs); !errors.Is(err, uvm.ErrAcquired) {
		t.Fatalf("Evict with an acquired block last: %v", err)
	}
	if err := tr.Evict(append(hs[:n-1:n-1], gone)); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Fatalf("Evict with a freed handle last: %v", err)
	}
	// A refused handle is the caller's error, not a failed batch: no block moved, no failure.
	if st := tr.Stats(); st.DeviceBytes != n*size || st.Moved(false) != before.Moved(false) || st.Failures != before.Failures {
		t.Fatalf("after the refused Evicts: %d device bytes, want %d; out %+v -> %+v, failures %d -> %d",
			st.DeviceBytes, n*size, before.Moved(false), st.Moved(false), before.Failures, st.Failures)
	}
	must(t, tr.Release(hs[n-1], s))
	must(t, tr.Evict(hs))
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(b, pattern(byte(i), size)) {
			t.Fatalf("block %d: bytes differ after the Evict", i)
		}
		must(t, tr.ReleaseHost(h))
	}
	// More than the budget: refused, none of them on the device.
	big := filled(t, tr, 1100, size)
	if err := tr.Prefetch(big, s); !errors.Is(err, uvm.ErrTooLarge) {
		t.Fatalf("a Prefetch of more than the budget: %v", err)
	}
	st = tr.Stats()
	checkAccounts(t, st)
	if st.DeviceBytes != 0 {
		t.Fatalf("a Prefetch refused for its size left %d device bytes", st.DeviceBytes)
	}
}

// TestPattern checks that pattern's copies write seed + 7i + i/251 at every byte, across
// several periods.
func TestPattern(t *testing.T) {
	for _, n := range []int{0, 1, 250, 251, patternPeriod - 1, patternPeriod, 3*patternPeriod + 5} {
		b := pattern(9, n)
		for i := range b {
			if want := 9 + byte(i*7+i/251); b[i] != want {
				t.Fatalf("pattern(9, %d): byte %d is %#x, want %#x", n, i, b[i], want)
			}
		}
	}
}

// TestOwnCapacityLimits: a DeviceBudget or HostCapacity within the documented 128 TiB whose own
// device heap or host pool (a quarter, an eighth more) would not fit 128 TiB is refused with
// ErrInvalidOptions naming the limit, and the default HostCapacity (4x the budget) is capped to
// the largest the tier's own pool serves. Before, a 64 TiB budget with the default HostCapacity
// failed with the pool's error for a 288 TiB capacity the caller never gave, not matching
// ErrInvalidOptions, and so did a budget or host capacity just under 128 TiB.
func TestOwnCapacityLimits(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, o := range []uvm.Options{{DeviceBudget: 1 << 46}, {DeviceBudget: uvm.MaxOwnBudget},
		{DeviceBudget: 1 << 20, HostCapacity: uvm.MaxOwnHostCapacity}} {
		tr, err := uvm.New(public(dev), o)
		if err != nil {
			t.Fatalf("New with DeviceBudget %d, HostCapacity %d: %v", o.DeviceBudget, o.HostCapacity, err)
		}
		must(t, tr.Close())
	}
	for _, o := range []uvm.Options{{DeviceBudget: uvm.MaxOwnBudget + 1}, {DeviceBudget: 1 << 47},
		{DeviceBudget: 1 << 20, HostCapacity: uvm.MaxOwnHostCapacity + 1}, {DeviceBudget: 1 << 20, HostCapacity: 1 << 47}} {
		_, err := uvm.New(public(dev), o)
		if !errors.Is(err, uvm.ErrInvalidOptions) || !strings.Contains(err.Error(), "the most a tier's own") {
			t.Errorf("New with DeviceBudget %d, HostCapacity %d: %v, want ErrInvalidOptions naming the limit",
				o.DeviceBudget, o.HostCapacity, err)
		}
	}
}
