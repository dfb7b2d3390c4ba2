package ipcpool

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A hostile owner of a VMM pool (Options.VMM), against the fake driver: what it sends as the
// regions are descriptors of exported host granules, which the attaching process imports and
// maps one after another.

// vmmOwner is a fake VMM owner's memory: its control region (a memfd, as a true owner writes
// it) and exportable host granules it made, each of which it may export any number of times.
type vmmOwner struct {
	t       *testing.T
	f       *fakecuda.Driver
	d       *cuda.Device
	h       hello
	ctl     int
	handles []cuda.MemHandle
	before  int64 // the driver's handles before the owner made its own
}

// newVMMOwner makes the control region of a VMM pool of geometry l (the hello's slot 1) and,
// for each of sizes, exportable host granules of that size.
func newVMMOwner(t *testing.T, f *fakecuda.Driver, d *cuda.Device, l layout, sizes ...uintptr) *vmmOwner {
	t.Helper()
	o := &vmmOwner{t: t, f: f, d: d, h: hello{pool: 99, slot: 1, serial: 1, layout: l, ctlSize: l.ctlBytes(), vmm: true, epoch: 1},
		before: f.Stat(fakecuda.Handles)}
	o.ctl = memfds(t, o.h.ctlSize)[0]
	base, err := mapCtl(o.ctl, o.h.ctlSize)
	must(t, "map", err)
	t.Cleanup(func() { _ = unmap(base, o.h.ctlSize) })
	c := newCtl(l, words(base, o.h.ctlSize))
	c.writeHeader(o.h.pool, 1)
	c.slotStore(o.h.slot, sSerial, o.h.serial)
	for _, n := range sizes {
		h, err := d.MemCreateExportable(n, cuda.MemLocation{Type: int32(pcuda.LocationHostNUMA)})
		must(t, "MemCreateExportable", err)
		t.Cleanup(func() { _ = d.MemRelease(h) })
		o.handles = append(o.handles, h)
	}
	return o
}

// export returns a new descriptor of the owner's allocation i (closed when the test ends).
func (o *vmmOwner) export(i int) int {
	o.t.Helper()
	fd, err := o.d.MemExportFD(o.handles[i])
	must(o.t, "MemExportFD", err)
	o.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// serve serves the pool with the descriptors sent (the control region's first), lending
// grants 0, 1, 2... in turn, and returns the socket's path.
func (o *vmmOwner) serve(sent []int) string {
	var next atomic.Uint64
	return serveHello(o.t, o.h, sent, func(m msg) msg {
		return msg{op: opReply, seq: m.seq, a: stOK, b: next.Add(1) - 1}
	})
}

// checkLeftOnly fails t unless the driver holds the owner's handles and nothing else: no
// handle, reservation or mapping of the attaching process's.
func (o *vmmOwner) checkLeftOnly(when string) {
	o.t.Helper()
	f := o.f
	h, r, m := f.Stat(fakecuda.Handles)-o.before, f.Stat(fakecuda.Reservations), f.Stat(fakecuda.Mappings)
	if h != int64(len(o.handles)) || r != 0 || m != 0 {
		o.t.Errorf("%s: %d handles (the owner's %d), %d reservations, %d mappings left", when, h, len(o.handles), r, m)
	}
}

// An owner that sends one export as two regions of a VMM pool (the same descriptor twice, or
// two descriptors of one allocation) makes the process map one allocation twice: the grants
// it lends in each region are one memory, and two buffers of two Allocs overlap. The attach
// must be refused with ErrProtocol, leaving nothing imported or mapped. (The memfd path
// refuses one file sent twice: TestAliasedRegionsRefused; the VMM path checked nothing.)
//
// On the fake, every export of an allocation is the allocation's memfd, so fstat names it. On
// a GPU an export is a descriptor the driver opens on its device node (UNMEASURED: what
// NVIDIA's RM interface headers say of exported objects), so two exports of one allocation
// look like two exports of two: only the same descriptor sent twice (one open file) can be
// told apart there.
func TestFakeAliasedVMMRegionsRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	l := layout{regions: 2, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	for _, c := range []struct {
		name string
		pick func(o *vmmOwner) []int
	}{
		{"one descriptor as two regions", func(o *vmmOwner) []int { x := o.export(0); return []int{o.ctl, x, x} }},
		{"two exports of one allocation", func(o *vmmOwner) []int { return []int{o.ctl, o.export(0), o.export(0)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newVMMOwner(t, f, d, l, l.regionSize, l.regionSize)
			path := o.serve(c.pick(o))
			p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, Timeout: time.Second})
			if err == nil {
				defer p.Close()
				showAliased(t, p)
				t.Fatalf("Attach to a VMM owner sending %s: accepted, want ErrProtocol", c.name)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Attach to a VMM owner sending %s: %v, want ErrProtocol", c.name, err)
			}
			retryStrays()
			o.checkLeftOnly(c.name)
		})
	}
}

// An owner whose regions do not import or map (a descriptor that is no export, granules
// smaller than the hello's region size, the first region right and the second short) fails
// the attach, and the process gives back everything it imported, reserved and mapped. When
// the driver refuses to release what was imported, the process keeps it (the error says so)
// and releases it at a later Attach, Serve or Close: before, the failed import's cleanup
// dropped the refused handle, held until the process exited.
func TestFakeVMMRegionsRefusedLeaveNothing(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	l := layout{regions: 2, regionSize: 4 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	notAnExport := func(o *vmmOwner) []int { return []int{o.ctl, o.export(0), memfds(t, l.regionSize)[0]} }
	for _, c := range []struct {
		name    string
		sizes   []uintptr
		pick    func(o *vmmOwner) []int
		refused bool // the driver refuses the release of region 0's import
	}{
		{"a memfd as region 1", []uintptr{4 << 20}, notAnExport, false},
		{"a memfd as region 1, region 0's release refused", []uintptr{4 << 20}, notAnExport, true},
		{"regions of half the size", []uintptr{2 << 20, 2 << 20}, nil, false},
		{"region 1 of half the size", []uintptr{4 << 20, 2 << 20}, nil, false},
		{"region 1 of half the size, region 0's release refused", []uintptr{4 << 20, 2 << 20}, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newVMMOwner(t, f, d, l, c.sizes...)
			sent := []int{o.ctl, o.export(0), o.export(1 % len(c.sizes))}
			if c.pick != nil {
				sent = c.pick(o)
			}
			path := o.serve(sent)
			if c.refused {
				f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultNotSupported)
			}
			p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, Timeout: time.Second})
			if err == nil {
				p.Close()
				t.Fatal("Attach accepted it")
			}
			if c.refused && !errors.Is(err, pcuda.ErrNotSupported) {
				t.Errorf("Attach whose cleanup's release was refused: %v, want the refusal", err)
			}
			retryStrays()
			o.checkLeftOnly("after the failed Attach")
		})
	}
}

// An owner whose regions are bigger than the hello says is accepted: the process maps the
// first region-size bytes of each, which is all the pool lends.
func TestFakeVMMRegionsBiggerAccepted(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	l := layout{regions: 2, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	o := newVMMOwner(t, f, d, l, 4<<20, 4<<20)
	p, err := Attach(context.Background(), o.serve([]int{o.ctl, o.export(0), o.export(1)}), AttachOptions{Pool: cudaHost, Timeout: time.Second})
	must(t, "Attach", err)
	if n := f.Stat(fakecuda.Mappings); n != 2 {
		t.Errorf("%d mappings, want 2", n)
	}
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 3)
	checkSeq(t, b, 3)
	must(t, "Free", p.Free(b))
	must(t, "Close", p.Close())
	o.checkLeftOnly("after Close")
}

// An owner whose Serve fails after it made some of a VMM pool's granules gives them back:
// the driver refusing the release keeps it until a later Attach, Serve or Close (before, it
// was dropped, held until the process exited); a mapping of the control region that fails
// (before, after the granules were made, left every one of them held until the process
// exited).
func TestFakeVMMServeFailureLeavesNothing(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := t.TempDir() + "/pool.sock"
	o := Options{Size: 8 << 20, RegionSize: 2 << 20, VMM: true, Pool: cudaHost}
	var before int64 // the handles of an earlier part that failed
	check := func(when string) {
		t.Helper()
		h, r, m := f.Stat(fakecuda.Handles)-before, f.Stat(fakecuda.Reservations), f.Stat(fakecuda.Mappings)
		if h != 0 || r != 0 || m != 0 {
			t.Errorf("%s: %d handles, %d reservations, %d mappings left", when, h, r, m)
		}
	}

	f.FailAfter(fakecuda.CallCreate, 2, fakecuda.ResultOutOfMemory) // the third region's
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultNotSupported)
	if _, err := Serve(path, o); !errors.Is(err, pcuda.ErrOutOfMemory) || !errors.Is(err, pcuda.ErrNotSupported) {
		t.Errorf("Serve whose third region was refused, and the release of the first: %v", err)
	}
	if n := f.Stat(fakecuda.Handles); n != 1 {
		t.Errorf("%d handles after Serve failed, want the one whose release was refused", n)
	}
	retryStrays()
	check("after a failed Serve whose release was refused")

	before = f.Stat(fakecuda.Handles)
	mapFault = func() error { return errors.New("mapping refused (a test's)") }
	_, err := Serve(path, o)
	mapFault = nil
	if err == nil {
		t.Fatal("Serve whose control region did not map succeeded")
	}
	check("after a Serve whose control region did not map")
}

// An owner of a VMM pool that hangs up, or stalls, once it has sent the hello and the regions
// fails the attach (at once, or at the timeout), and the process gives back everything it
// imported and mapped.
func TestFakeVMMOwnerGoneMidHandshake(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	l := layout{regions: 2, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	for _, stall := range []bool{false, true} {
		o := newVMMOwner(t, f, d, l, l.regionSize, l.regionSize)
		sent := []int{o.ctl, o.export(0), o.export(1)}
		path := fakeServer(t, func(conn *net.UnixConn) {
			if _, err := readMsg(conn); err != nil {
				return
			}
			if sendFds(conn, o.h.encode(), sent, time.Second) == nil && stall {
				time.Sleep(2 * time.Second)
			}
		})
		if p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost, Timeout: 300 * time.Millisecond}); err == nil {
			p.Close()
			t.Fatalf("Attach to an owner that stalls (%v) or hangs up: accepted", stall)
		}
		retryStrays()
		o.checkLeftOnly("after the failed Attach")
	}
}
