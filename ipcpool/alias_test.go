package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// An owner (or a donor to an adopting owner: adopt maps through the same mapSpace) that sends
// one memfd as two regions of the pool, or the control region's as a region, passes every
// check of size and seals; the process then maps two regions, or the control region and a
// region, over the same memory, and two grants the owner lends it (distinct, each inside the
// pool) are one memory: two buffers of one Alloc each overlap. The attach must be refused.
func TestAliasedRegionsRefused(t *testing.T) {
	// Two regions of 2 MiB sent as one memfd twice.
	two := layout{regions: 2, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	// A control region of exactly 2 MiB, sent again as the pool's one region.
	one := layout{regions: 1, regionSize: 2 << 20, grantSize: 2 << 20, slots: 1, ringCap: 8, exports: 32760}
	if one.ctlBytes() != one.regionSize {
		t.Fatalf("the control region is %d bytes, want %d", one.ctlBytes(), one.regionSize)
	}
	for _, c := range []struct {
		name string
		l    layout
		slot int
		pick func(fds []int) []int
	}{
		{"one memfd as two regions", two, 1, func(fds []int) []int { return []int{fds[0], fds[1], fds[1]} }},
		{"the control region as a region", one, 0, func(fds []int) []int { return []int{fds[0], fds[0]} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var next atomic.Uint64 // grants 0, 1, 2... in turn
			path := fakeOwnerWith(t, c.l, c.slot, c.pick, func(m msg) msg {
				return msg{op: opReply, seq: m.seq, a: stOK, b: next.Add(1) - 1}
			})
			p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: time.Second})
			if err == nil {
				defer p.Close()
				if c.l.regions == 2 {
					showAliased(t, p)
				}
				t.Fatalf("Attach to an owner sending %s: accepted, want ErrProtocol", c.name)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Attach to an owner sending %s: %v, want ErrProtocol", c.name, err)
			}
		})
	}
}

// The same, from a donor: a process that rejoins an owner waiting to adopt the pool hands it
// the pool's descriptors with one memfd as both regions. The owner must cut it off, not adopt
// the pool (and ask for its claims).
func TestAliasedDonationRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	l := layout{regions: 2, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	const pool = 77
	fds := memfds(t, l.ctlBytes(), l.regionSize)
	base, err := mapCtl(fds[0], l.ctlBytes())
	must(t, "map", err)
	t.Cleanup(func() { _ = unmap(base, l.ctlBytes()) })
	c := newCtl(l, words(base, l.ctlBytes()))
	c.writeHeader(pool, 0)
	c.slotStore(1, sSerial, 1)
	served := make(chan *Owner, 1)
	go func() {
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: 2 * time.Second, Timeout: 300 * time.Millisecond, FallbackPageable: true})
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	t.Cleanup(func() {
		if w := <-served; w != nil {
			_ = w.Close()
		}
	})
	conn := donateTo(t, path, pool, []int{fds[0], fds[1], fds[1]})
	if m, err := readMsg(conn); err == nil {
		t.Fatalf("the owner adopted a pool of one memfd as two regions: it answered %+v", m)
	}
}

// distinctFiles on descriptors of a device node, as a GPU driver's VMM exports are (UNMEASURED:
// each a descriptor the driver opens on its device node, one inode for all): two opens of one
// node are two files and pass (two exports of two allocations, which a check of the inode
// alone refused: every VMM pool of two regions or more on a GPU), one open sent twice is one
// file and is refused (kcmp; where the kernel refuses kcmp it cannot be told and passes).
func TestDistinctFilesDeviceNodes(t *testing.T) {
	var two [2]int
	for i := range two {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		must(t, "open /dev/null", err)
		defer unix.Close(fd)
		two[i] = fd
	}
	dup, err := unix.Dup(two[0])
	must(t, "dup", err)
	defer unix.Close(dup)
	ctl := memfds(t, 4096)[0]
	if err := distinctFiles([]int{ctl, two[0], two[1]}); err != nil {
		t.Errorf("two opens of one device node: %v, want them distinct", err)
	}
	_, kerr := sameOpenFile(two[0], dup)
	switch err := distinctFiles([]int{ctl, two[0], dup}); {
	case kerr != nil:
		t.Logf("kcmp refused (%v): one open sent twice cannot be told here", kerr)
	case !errors.Is(err, ErrProtocol):
		t.Errorf("one open of a device node sent twice: %v, want ErrProtocol", err)
	}
	if err := distinctFiles([]int{ctl, two[0], ctl}); !errors.Is(err, ErrProtocol) {
		t.Errorf("the control region's memfd sent twice: %v, want ErrProtocol", err)
	}
}

// showAliased shows what a pool of two aliased regions, once accepted, leads to: two buffers,
// in two grants, of one memory (a write to one changes the other).
func showAliased(t *testing.T, p *Process) {
	t.Helper()
	a, err := p.Alloc(1<<21 - 4096)
	must(t, "Alloc", err)
	b, err := p.Alloc(1<<21 - 4096)
	must(t, "Alloc", err)
	fillSeq(a, 1)
	fillSeq(b, 2)
	if a[0] != 1 {
		t.Errorf("buffers %#x and %#x, in two grants, are one memory: a write to one changed the other",
			mem.Addr(a), mem.Addr(b))
	}
}
