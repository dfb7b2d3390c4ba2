package fakecuda

import (
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestPinCostOverlaps: the modelled cost of cuMemCreate is paid outside the fake's lock, so two
// threads creating at once take about one call's time, not two.
func TestPinCostOverlaps(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const delay = 60 * time.Millisecond
	f.SetPinCost(false, delay, 0)
	create := func() time.Duration {
		start := time.Now()
		h, err := f.MemCreate(d, gran, hostLoc, 0)
		must(t, "MemCreate", err)
		must(t, "MemRelease", f.MemRelease(d, h))
		return time.Since(start)
	}
	if took := create(); took < delay {
		t.Fatalf("one cuMemCreate took %v with a %v cost", took, delay)
	}
	// The proof of overlap is MaxInflight: both calls were inside the modelled cost at once,
	// which a cost paid under the fake's lock never allows, in any try. A loaded machine may
	// start the second goroutine only after the first has paid (the scheduler late by tens of
	// milliseconds): then the pair is tried again, up to five times.
	var n int
	var took time.Duration
	for try := 0; try < 5 && n != 2; try++ {
		start := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); create() }()
		}
		wg.Wait()
		took = time.Since(start)
		n = f.MaxInflight()
		if again := f.MaxInflight(); again != 0 {
			t.Fatalf("MaxInflight after reading = %d, want 0", again)
		}
	}
	if n != 2 {
		t.Errorf("MaxInflight = %d, want 2: two cuMemCreate on two threads took %v, serialized (one takes %v)", n, took, delay)
	}
	f.SetPinCost(false, 0, 0)
	fastest := time.Hour
	for range 3 { // the fastest of three: a loaded machine may stall one
		fastest = min(fastest, create())
	}
	if fastest >= delay {
		t.Errorf("cuMemCreate without cost took %v", fastest)
	}
}

// TestPinCostPopulates: with populate on, cuMemHostRegister faults in the range's pages, as the
// driver pins them.
func TestPinCostPopulates(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 4 << 20
	// faults counts the page faults reading every page of b takes: none for pages the
	// registration faulted in.
	faults := func(b []byte) int64 {
		var before, after unix.Rusage
		must(t, "getrusage", unix.Getrusage(unix.RUSAGE_SELF, &before))
		sum := byte(0)
		for i := 0; i < len(b); i += 4096 {
			sum += b[i]
		}
		must(t, "getrusage", unix.Getrusage(unix.RUSAGE_SELF, &after))
		if sum != 0 {
			t.Fatal("fresh memory not zero")
		}
		return after.Minflt - before.Minflt
	}
	for _, populate := range []bool{false, true} {
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		must(t, "mmap", err)
		f.SetPinCost(populate, 0, 0)
		must(t, "MemHostRegister", d.MemHostRegister(mem.Addr(b), n, cuda.HostRegisterPortable))
		got := faults(b)
		must(t, "MemHostUnregister", d.MemHostUnregister(mem.Addr(b)))
		must(t, "munmap", unix.Munmap(b))
		if populate && got > n/4096/4 || !populate && got < n/4096/2 {
			t.Errorf("populate %v: reading the %d pages after registering took %d faults", populate, n/4096, got)
		}
	}
	f.SetPinCost(false, 0, 0)
}

// TestFailAfter: each injected failure hits the call named after the calls skipped, once.
func TestFailAfter(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, err := d.MemAddressReserve(4*gran, 0)
	must(t, "MemAddressReserve", err)
	f.FailAfter(CallCreate, 2, ResultOutOfMemory)
	var hs []cuda.MemHandle
	for i := range 4 {
		h, err := f.MemCreate(d, gran, hostLoc, 0)
		if i == 2 {
			wantErr(t, "the third cuMemCreate", err, pinmalloc.ErrOutOfMemory)
			continue
		}
		must(t, "MemCreate", err)
		hs = append(hs, h)
	}
	f.FailAfter(CallMap, 1, ResultInvalidValue)
	must(t, "first MemMap", d.MemMap(va, gran, hs[0]))
	wantErr(t, "second MemMap", d.MemMap(va+gran, gran, hs[1]), pinmalloc.ErrInvalidValue)
	must(t, "MemMap again", d.MemMap(va+gran, gran, hs[1]))
	f.FailAfter(CallAccess, 0, ResultNotSupported)
	acc := Access{hostLoc, rw}
	wantErr(t, "MemSetAccess", f.MemSetAccess(d, va, 2*gran, acc), pinmalloc.ErrNotSupported)
	must(t, "MemSetAccess again", f.MemSetAccess(d, va, 2*gran, acc))
	f.FailAfter(CallUnmap, 0, ResultInvalidValue)
	wantErr(t, "MemUnmap", d.MemUnmap(va, 2*gran), pinmalloc.ErrInvalidValue)
	if d.MemMap(va, gran, hs[2]) == nil { // over a mapping: refused
		t.Fatal("a failed cuMemUnmap unmapped the range")
	}
	must(t, "MemUnmap again", d.MemUnmap(va, 2*gran))
	f.FailAfter(CallRelease, 1, ResultInvalidValue)
	must(t, "first MemRelease", f.MemRelease(d, hs[0]))
	wantErr(t, "second MemRelease", f.MemRelease(d, hs[1]), pinmalloc.ErrInvalidValue)
	if live := f.LiveObjects(); live["handles"] != 2 {
		t.Errorf("a failed cuMemRelease released the handle: %v", live)
	}
	must(t, "MemMap of the handle a failed release left", d.MemMap(va, gran, hs[1]))
	must(t, "MemUnmap", d.MemUnmap(va, gran))
	for _, h := range hs[1:] {
		must(t, "MemRelease", f.MemRelease(d, h))
	}
	must(t, "MemAddressFree", d.MemAddressFree(va, 4*gran))

	b, err := unix.Mmap(-1, 0, gran, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "mmap", err)
	defer unix.Munmap(b)
	f.FailAfter(CallRegister, 0, ResultOutOfMemory)
	wantErr(t, "MemHostRegister", d.MemHostRegister(mem.Addr(b), gran, 0), pinmalloc.ErrOutOfMemory)
	must(t, "MemHostRegister again", d.MemHostRegister(mem.Addr(b), gran, 0))
	f.FailAfter(CallUnregister, 0, ResultInvalidValue)
	wantErr(t, "MemHostUnregister", d.MemHostUnregister(mem.Addr(b)), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemHostRegister over what a failed unregister left", d.MemHostRegister(mem.Addr(b), gran, 0),
		pinmalloc.ErrAlreadyRegistered)
	must(t, "MemHostUnregister again", d.MemHostUnregister(mem.Addr(b)))
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	f.FailAfter(CallRecord, 1, ResultInvalidValue)
	must(t, "first EventRecord", d.EventRecord(ev, 0))
	records := f.Stat(EventRecords)
	wantErr(t, "second EventRecord", d.EventRecord(ev, 0), pinmalloc.ErrInvalidValue)
	if n := f.Stat(EventRecords); n != records {
		t.Errorf("a failed cuEventRecord counted as a record: %d -> %d", records, n)
	}
	must(t, "EventRecord again", d.EventRecord(ev, 0))
	must(t, "EventDestroy", d.EventDestroy(ev))
	if live := f.LiveObjects(); len(live) != 1 || live["retains"] != 1 {
		t.Errorf("after the failures: %v", live)
	}
}

// TestNUMAControls: what a device reports of its node, a driver refusing HOST_NUMA while HOST
// works, the bytes held per node, and the PCI attributes.
func TestNUMAControls(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(3)
	f.SetNUMANodes(2)
	d := f.Open(t, 2)
	attr := func(a int) int {
		v, err := d.Attribute(a)
		must(t, "Attribute", err)
		return v
	}
	if v := attr(134); v != 0 {
		t.Errorf("HOST_NUMA_ID of device 2 of 2 nodes = %d, want 0", v)
	}
	f.SetHostNUMAID(2, -1)
	if v := attr(134); v != -1 {
		t.Errorf("HOST_NUMA_ID set unknown = %d", v)
	}
	f.SetHostNUMAID(2, 1)
	if v := attr(134); v != 1 {
		t.Errorf("HOST_NUMA_ID set to 1 = %d", v)
	}
	f.SetHostNUMAID(2, NUMADefault)
	if bus, dom, dv := attr(33), attr(50), attr(34); bus != 0x12 || dom != 0 || dv != 0 {
		t.Errorf("PCI of device 2: domain %d bus %#x device %d", dom, bus, dv)
	}
	numa1 := cuda.MemLocation{Type: locHostNUMA, ID: 1}
	h1, err := f.MemCreate(d, gran, numa1, 0)
	must(t, "MemCreate at node 1", err)
	h2, err := f.MemCreate(d, 2*gran, hostLoc, 0)
	must(t, "MemCreate at HOST", err)
	if a, b, c := f.NodeBytes(1), f.NodeBytes(-1), f.NodeBytes(0); a != gran || b != 2*gran || c != 0 {
		t.Errorf("node bytes: node 1 %d, host %d, node 0 %d", a, b, c)
	}
	f.RefuseHostNUMA(true, true)
	if v := attr(141); v != 1 {
		t.Errorf("attribute 141 while refusing (attribute kept) = %d", v)
	}
	_, err = f.MemCreate(d, gran, numa1, 0)
	wantErr(t, "MemCreate at HOST_NUMA refused", err, pinmalloc.ErrNotSupported)
	_, err = f.Granularity(d, numa1)
	wantErr(t, "granularity at HOST_NUMA refused", err, pinmalloc.ErrNotSupported)
	h3, err := f.MemCreate(d, gran, hostLoc, 0)
	must(t, "MemCreate at HOST while HOST_NUMA is refused", err)
	f.RefuseHostNUMA(true, false)
	if v := attr(141); v != 0 {
		t.Errorf("attribute 141 while refusing = %d", v)
	}
	f.RefuseHostNUMA(false, false)
	if v := attr(141); v != 1 {
		t.Errorf("attribute 141 restored = %d", v)
	}
	for _, h := range []cuda.MemHandle{h1, h2, h3} {
		must(t, "MemRelease", f.MemRelease(d, h))
	}
	if errors.Is(nil, pinmalloc.ErrNotSupported) {
		t.Fatal("unreachable")
	}
}
