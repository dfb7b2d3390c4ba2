package heap

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// granuleProvider is pageable host memory that reports a commit granule of its own (a multiple
// of the host page: 16 KiB and 64 KiB as on arm64 kernels, 2 MiB as CUDA's VMM), and records
// which host pages are committed, so that a model can check that every live block lies in
// committed memory. Decommitted memory is PROT_NONE (the host provider's own doing), so a
// touch of it faults as well.
type granuleProvider struct {
	*arena.HostProvider
	granule uintptr
	budget  int // host pages it commits at most (0: no limit), refusing more with ErrExhausted
	// zeroFails, when set, says whether a clear (Zero) fails, and how: before it began
	// (ErrNotStarted) or not.
	zeroFails func() error
	mu        sync.Mutex
	base      uintptr          // the region's (granules count from it; one region)
	pages     map[uintptr]bool // host page offset from base → committed
}

func newGranuleProvider(granule uintptr) *granuleProvider {
	return &granuleProvider{HostProvider: arena.PageableHost(arena.HostOptions{}), granule: granule, pages: map[uintptr]bool{}}
}

func (p *granuleProvider) Caps() arena.Caps {
	c := p.HostProvider.Caps()
	c.Granule = max(c.Granule, p.granule)
	return c
}

// Zero clears host memory, as the host provider does, unless zeroFails says it fails.
func (p *granuleProvider) Zero(addr, size uintptr) error {
	if p.zeroFails != nil {
		if err := p.zeroFails(); err != nil {
			return err
		}
	}
	return p.HostProvider.Zero(addr, size)
}

func (p *granuleProvider) mark(r *arena.Region, off, size uintptr, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.base == 0 {
		p.base = r.Base
	} else if p.base != r.Base {
		panic("granuleProvider: a second region")
	}
	for o := off; o < off+size; o += 4096 {
		if on {
			p.pages[o] = true
		} else {
			delete(p.pages, o)
		}
	}
}

func (p *granuleProvider) Commit(r *arena.Region, off, size uintptr) error {
	if off%p.granule != 0 || size%p.granule != 0 {
		return fmt.Errorf("commit [%#x, +%#x) off the granule %#x", off, size, p.granule)
	}
	if p.budget > 0 {
		p.mu.Lock()
		n := 0
		for o := off; o < off+size; o += 4096 {
			if !p.pages[o] {
				n++
			}
		}
		over := len(p.pages)+n > p.budget
		p.mu.Unlock()
		if over {
			return fmt.Errorf("%w: commit budget of %d pages", arena.ErrExhausted, p.budget)
		}
	}
	if err := p.HostProvider.Commit(r, off, size); err != nil {
		return err
	}
	p.mark(r, off, size, true)
	return nil
}

func (p *granuleProvider) Decommit(r *arena.Region, off, size uintptr) error {
	if off%p.granule != 0 || size%p.granule != 0 {
		return fmt.Errorf("decommit [%#x, +%#x) off the granule %#x", off, size, p.granule)
	}
	p.mark(r, off, size, false)
	return p.HostProvider.Decommit(r, off, size)
}

// committed reports the first host page of [a, a+n) that is not committed, if any.
func (p *granuleProvider) uncommitted(a, n uintptr) (uintptr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a < p.base {
		return a, true
	}
	for o := (a - p.base) &^ 4095; p.base+o < a+n; o += 4096 {
		if !p.pages[o] {
			return p.base + o, true
		}
	}
	return 0, false
}

// externalProvider is an exclusive external region of host memory (arena.External) whose base
// lies off a page, and off the 2 MiB grid, so that the arena's chunks straddle the group's
// address table's slots and each granule two pages; it records its commits as
// granuleProvider does (it commits nothing: external memory is the caller's).
type externalProvider struct {
	*arena.ExternalProvider
	book *granuleProvider // its page book only
}

func newExternalProvider(t *testing.T, size, skew uintptr) *externalProvider {
	m, err := unix.Mmap(-1, 0, int(size+skew+4096), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	e, err := arena.External(arena.ExternalRegion{Base: mem.Addr(m) + skew, Size: size, Kind: arena.HostPageable, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	return &externalProvider{ExternalProvider: e, book: newGranuleProvider(4096)}
}

func (p *externalProvider) Commit(r *arena.Region, off, size uintptr) error {
	if err := p.ExternalProvider.Commit(r, off, size); err != nil {
		return err
	}
	p.book.mark(r, off, size, true)
	return nil
}

func (p *externalProvider) Decommit(r *arena.Region, off, size uintptr) error {
	p.book.mark(r, off, size, false)
	return p.ExternalProvider.Decommit(r, off, size)
}

// joinProvider is granuleProvider at 2 MiB that joins, as a host registration does
// (arena.Joiner): each commit makes a unit of its range, a join makes exactly its range one unit
// (cutting the units it overlaps), a decommit cuts the units it overlaps. A device copies a
// host range only inside one unit, so every live block must lie inside one.
type joinProvider struct {
	*granuleProvider
	umu   sync.Mutex
	units [][2]uintptr // disjoint [lo, hi) addresses
}

func newJoinProvider() *joinProvider {
	return &joinProvider{granuleProvider: newGranuleProvider(2 << 20)}
}

// cut removes [lo, hi) from the units, keeping the parts of each outside it.
func (p *joinProvider) cut(lo, hi uintptr) {
	var keep [][2]uintptr
	for _, u := range p.units {
		if u[1] <= lo || u[0] >= hi {
			keep = append(keep, u)
			continue
		}
		if u[0] < lo {
			keep = append(keep, [2]uintptr{u[0], lo})
		}
		if u[1] > hi {
			keep = append(keep, [2]uintptr{hi, u[1]})
		}
	}
	p.units = keep
}

func (p *joinProvider) Commit(r *arena.Region, off, size uintptr) error {
	if err := p.granuleProvider.Commit(r, off, size); err != nil {
		return err
	}
	p.umu.Lock()
	defer p.umu.Unlock()
	p.cut(r.Base+off, r.Base+off+size)
	p.units = append(p.units, [2]uintptr{r.Base + off, r.Base + off + size})
	return nil
}

func (p *joinProvider) Decommit(r *arena.Region, off, size uintptr) error {
	p.umu.Lock()
	p.cut(r.Base+off, r.Base+off+size)
	p.umu.Unlock()
	return p.granuleProvider.Decommit(r, off, size)
}

func (p *joinProvider) Join(r *arena.Region, off, size uintptr) error {
	if q, bad := p.uncommitted(r.Base+off, size); bad {
		return fmt.Errorf("join [%#x, +%#x): page %#x uncommitted", r.Base+off, size, q)
	}
	p.umu.Lock()
	defer p.umu.Unlock()
	p.cut(r.Base+off, r.Base+off+size)
	p.units = append(p.units, [2]uintptr{r.Base + off, r.Base + off + size})
	return nil
}

// inOneUnit reports whether [a, a+n) lies inside one unit.
func (p *joinProvider) inOneUnit(a, n uintptr) bool {
	p.umu.Lock()
	defer p.umu.Unlock()
	for _, u := range p.units {
		if a >= u[0] && a+n <= u[1] {
			return true
		}
	}
	return false
}

// lendProvider lends 4 MiB units of one committed mapping, as a shared pool's grants are
// (arena.Lender, Caps.Releases): the arena releases a region once its chunks have been free for
// the purge delay, or at Trim, and a later loan may come back at the same addresses, with the
// same chunk IDs. Its book has every lent page committed.
type lendProvider struct {
	book             *granuleProvider
	base, size, unit uintptr
	mu               sync.Mutex
	lent             map[uintptr]uintptr // base → size
}

func newLendProvider(t *testing.T, size uintptr) *lendProvider {
	m, err := unix.Mmap(-1, 0, int(size+2<<20), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	base := (mem.Addr(m) + 2<<20 - 1) &^ (2<<20 - 1)
	book := newGranuleProvider(4096)
	book.base = base
	return &lendProvider{book: book, base: base, size: size, unit: 4 << 20, lent: map[uintptr]uintptr{}}
}

func (l *lendProvider) Name() string              { return "lender" }
func (l *lendProvider) Kind() arena.Kind          { return arena.HostPageable }
func (l *lendProvider) Space() (uintptr, uintptr) { return l.base, l.size }
func (l *lendProvider) Unit() uintptr             { return l.unit }
func (l *lendProvider) Caps() arena.Caps {
	return arena.Caps{Granule: 4096, Aligns: true, Releases: true}
}
func (l *lendProvider) Commit(r *arena.Region, off, n uintptr) error   { return r.CheckRange(off, n) }
func (l *lendProvider) Decommit(r *arena.Region, off, n uintptr) error { return r.CheckRange(off, n) }

// Zero clears host memory (arena.Zeroer), for Zalloc.
func (l *lendProvider) Zero(addr, size uintptr) error {
	clear(mem.Bytes(addr, size))
	return nil
}

// Reserve lends the first free run of units that holds size bytes.
func (l *lendProvider) Reserve(size, align uintptr) (*arena.Region, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := (size + l.unit - 1) / l.unit * l.unit
	for off := uintptr(0); off+n <= l.size; off += l.unit {
		free := true
		for b, s := range l.lent {
			if b < l.base+off+n && l.base+off < b+s {
				free = false
			}
		}
		if free && (l.base+off)%align == 0 {
			l.lent[l.base+off] = n
			r := &arena.Region{Base: l.base + off, Size: n, Committed: true}
			l.book.mu.Lock()
			for o := off; o < off+n; o += 4096 {
				l.book.pages[o] = true
			}
			l.book.mu.Unlock()
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: lender full", arena.ErrExhausted)
}

func (l *lendProvider) Release(r *arena.Region) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lent[r.Base] != r.Size {
		return fmt.Errorf("%w: %#x not lent", arena.ErrInvalid, r.Base)
	}
	delete(l.lent, r.Base)
	l.book.mu.Lock()
	for o := r.Base - l.base; o < r.Base-l.base+r.Size; o += 4096 {
		delete(l.book.pages, o)
	}
	l.book.mu.Unlock()
	return nil
}

// modelBlock is a live block of the group model.
type modelBlock struct {
	liveBlock
	h    int  // index of its heap in the model's slots
	held bool // held (Group.Hold): only FreeHeld frees it
}

// groupModel drives a group of heaps of every kind over a small arena.
type groupModel struct {
	t    *testing.T
	r    *rand.Rand
	prov *granuleProvider
	join *joinProvider // prov's, when it joins

	uncleared      []int    // per heap: blocks a failed Zalloc set aside (Stats.Uncleared)
	unclearedBytes []uint64 // and their bytes
	a              *arena.Arena
	g              *Group
	hs             []*Heap   // slot → heap
	opts           []Options // slot → its options
	lend           *testLender
	away           bool // the lender's mutex is held: heap 0's owner is away, lending to none
	live           []modelBlock
	freed          []uintptr // addresses freed lately, for double frees
	sh             *shadow
	step           int

	shMu   sync.Mutex      // the shadow's, shared with the remote freer
	remote chan modelBlock // blocks the remote freer frees with Group.Free
	flight sync.WaitGroup  // blocks handed to it and not yet freed
	errs   chan error      // its first failure
}

// TestGroupModel runs random sequences over a group of four heaps (a lender, a heap that borrows
// from it where memory is coarse, two RetainSegments heaps) over small arenas (24 MiB), so that
// trims, purges and full arenas come often: host memory with granules of 4 KiB, 16 KiB, 64 KiB and
// 2 MiB, 2 MiB that joins (joinProvider: every live block inside one unit), exclusive external
// regions off a page and off the 2 MiB grid, and regions lent in 4 MiB units that the arena gives
// back when idle and takes again (lendProvider), and locked memory (mlock, commits split over the
// arena's workers); each with and without a purge delay, and with and without a commit budget
// (ErrExhausted: tight heaps, forced purges); and clears that fail one time in ten (Zalloc: the
// block freed, or set aside until ReleaseUncleared). Steps: allocations of every kind and alignment
// (Alloc, AllocAligned, Zalloc, TryAlloc), frees by the owner, by another heap and by the group,
// sized, held (Hold, HoldSized, TryHoldSized, Unhold, FreeHeld) and tried (TryFreeOrHeld), frees
// from another goroutine racing the owners, Trim, PurgeIdle, ReleaseSpares, Collect, the arena's
// Trim, the lender away, Close (refused with ErrLiveBlocks while blocks live, nothing lost; a
// closed heap refuses with ErrClosed), bad frees (double, interior, foreign). After every step no
// two live blocks overlap and each lies in committed memory; at each free its bytes are checked,
// and Block, Size, Owner, Held and Extent (committed, over no other block) agree with the model;
// every 50 steps the heaps' Stats do, their invariants hold and the arena's Committed is what the
// provider committed. 3,000 steps per case, one seed (400 under the race detector: about 24
// blocks a case still go to the remote freer while the owners work, some 1,700 over the cases);
// 10,000 and two seeds in the long form (PINMALLOC_LONG=1), which CI's time allows.
func TestGroupModel(t *testing.T) {
	steps, seeds := 3_000, uint64(1)
	switch {
	case longRun():
		steps, seeds = 10_000, 2
	case raceEnabled:
		steps = 400
	}
	for _, granule := range []uintptr{4 << 10, 16 << 10, 64 << 10, 2 << 20, joinGranule, externalSkew8, externalSkew64K, lentUnits, lockedHost} {
		for _, delay := range []time.Duration{-1, time.Millisecond} {
			for _, budget := range []int{0, 10 << 20} {
				for seed := uint64(1); seed <= seeds; seed++ {
					t.Run(fmt.Sprintf("granule=%d/delay=%v/budget=%d/seed=%d", granule, delay, budget, seed), func(t *testing.T) {
						runGroupModel(t, granule, delay, budget, seed, steps)
					})
				}
			}
		}
	}
}

// joinGranule names the joining provider (joinProvider, 2 MiB) among the granules.
const joinGranule = 1

// externalSkew8 and externalSkew64K name the external regions (externalProvider) whose base
// is 8 bytes past a page (with chunks aligned to pages: Options.Align 4096), and 64 KiB + 256
// bytes past one.
const (
	externalSkew8   = 2
	externalSkew64K = 3
)

// lentUnits names the lender (lendProvider) among the granules, and lockedHost locked host
// memory (mlock: the memlock limit refuses commits with ErrMemlock; commits and decommits
// split over the arena's workers).
const (
	lentUnits  = 4
	lockedHost = 5
)

func runGroupModel(t *testing.T, granule uintptr, delay time.Duration, budget int, seed uint64, steps int) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	const capacity = 24 << 20
	var ap arena.Provider
	var space [2]uintptr // the lender's, when the arena's regions come and go in it
	prov := newGranuleProvider(granule)
	var join *joinProvider
	switch granule {
	case joinGranule:
		join = newJoinProvider()
		prov, ap = join.granuleProvider, join
	case externalSkew8, externalSkew64K:
		skew := uintptr(8)
		if granule == externalSkew64K {
			skew = 64<<10 + 256
		}
		e := newExternalProvider(t, capacity, skew)
		prov, ap = e.book, e
	case lockedHost:
		prov = newGranuleProvider(4096)
		prov.HostProvider = arena.LockedHost(arena.HostOptions{})
		ap = prov
	case lentUnits:
		l := newLendProvider(t, capacity)
		prov, ap = l.book, l
		space = [2]uintptr{l.base, l.size}
	default:
		ap = prov
	}
	prov.budget = budget / 4096
	regionSize := uintptr(capacity)
	if granule == lentUnits {
		regionSize = 4 << 20
	}
	al := uintptr(0)
	if granule == externalSkew8 {
		al = 4096 // the chunks on pages, and so the pages purged, but the granules (from the base) off them
	}
	a, err := arena.New(arena.Options{Provider: ap, Capacity: capacity, RegionSize: regionSize, PurgeDelay: delay, Align: al})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGroup(a)
	if err != nil {
		t.Fatal(err)
	}
	m := &groupModel{t: t, r: rand.New(rand.NewPCG(seed, 99)), prov: prov, join: join, a: a, g: g}
	if space[1] != 0 {
		m.sh = newShadow(space[0], space[1])
	}
	m.opts = []Options{{}, {Align: 256}, {Retention: RetainSegments}, {Align: 16, Retention: RetainSegments}}
	for i := range m.opts {
		m.hs = append(m.hs, m.newHeap(i))
	}
	m.uncleared, m.unclearedBytes = make([]int, len(m.hs)), make([]uint64, len(m.hs))
	if granule != lentUnits && granule != externalSkew8 && granule != externalSkew64K {
		zr := rand.New(rand.NewPCG(seed, 17))
		prov.zeroFails = func() error {
			switch zr.IntN(20) {
			case 0:
				return arena.NotStarted(errors.New("clear refused before it began"))
			case 1:
				return errors.New("clear failed, and may still run")
			}
			return nil
		}
	}
	m.remote, m.errs = make(chan modelBlock, 64), make(chan error, 1)
	go m.remoteFreer()
	defer close(m.remote)
	m.lend = &testLender{h: m.hs[0]}
	m.hs[1].SetLender(m.lend)
	for m.step = 0; m.step < steps; m.step++ {
		m.do()
		full := m.step%50 == 0
		if full {
			m.drain()
		}
		m.check(full)
	}
	m.drain()
	if m.away {
		m.lend.mu.Unlock()
		m.away = false
	}
	for len(m.live) > 0 {
		m.free(len(m.live)-1, 0)
	}
	for i, h := range m.hs {
		if got := h.ReleaseUncleared(); got != m.uncleared[i] {
			t.Fatalf("heap %d released %d uncleared blocks, want %d", i, got, m.uncleared[i])
		}
	}
	for i := len(m.hs) - 1; i >= 0; i-- { // the lender last
		if err := m.hs[i].Close(); err != nil {
			t.Fatalf("close heap %d: %v", i, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatalf("arena close: %v", err)
	}
}

func (m *groupModel) newHeap(i int) *Heap {
	h, err := m.g.NewHeap(m.opts[i])
	if err != nil {
		m.t.Fatalf("step %d: new heap %d: %v", m.step, i, err)
	}
	return h
}

// heap returns heap i when its owner is at hand, nil for the lender while it is away.
func (m *groupModel) heap(i int) *Heap {
	if i == 0 && m.away {
		return nil
	}
	return m.hs[i]
}

func (m *groupModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d: %s", m.step, fmt.Sprintf(format, args...))
}

func (m *groupModel) do() {
	r := m.r
	switch k := r.IntN(1000); {
	case k < 480 || len(m.live) == 0:
		if i := r.IntN(len(m.hs)); m.heap(i) != nil {
			m.alloc(i)
		}
	case k < 800:
		m.free(r.IntN(len(m.live)), r.IntN(5))
	case k < 860:
		m.handOff(r.IntN(len(m.live)))
	case k < 880:
		m.hold(r.IntN(len(m.live)))
	case k < 900:
		m.tryFree(r.IntN(len(m.live)))
	case k < 920:
		if h := m.heap(r.IntN(len(m.hs))); h != nil {
			h.Trim()
		}
	case k < 940:
		if h := m.heap(r.IntN(len(m.hs))); h != nil {
			h.PurgeIdle()
		}
	case k < 950:
		h := m.hs[2+r.IntN(2)]
		mark, _ := h.SpareMark()
		h.ReleaseSpares(mark)
	case k < 955:
		m.a.Trim()
	case k < 958:
		if h := m.heap(r.IntN(len(m.hs))); h != nil {
			h.Collect()
		}
	case k < 962:
		if i := r.IntN(len(m.hs)); m.heap(i) != nil {
			if got := m.hs[i].ReleaseUncleared(); got != m.uncleared[i] {
				m.fail("heap %d released %d uncleared blocks, want %d", i, got, m.uncleared[i])
			}
			m.uncleared[i], m.unclearedBytes[i] = 0, 0
		}
	case k < 965:
		if m.away {
			m.lend.mu.Unlock()
		} else {
			m.lend.mu.Lock()
		}
		m.away = !m.away
	case k < 975:
		if i := r.IntN(len(m.hs)); m.heap(i) != nil {
			m.close(i)
		}
	default:
		m.badFree()
	}
}

func (m *groupModel) alloc(i int) {
	r, h := m.r, m.hs[i]
	n := randSize(r)
	if r.IntN(4) == 0 {
		n = uintptr(1 + r.IntN(256))
	}
	var p uintptr
	var err error
	zero := false
	switch x := r.IntN(20); {
	case x == 0:
		p, err = h.AllocAligned(n, uintptr(16)<<r.IntN(18))
	case x == 1:
		p, err = h.Zalloc(n)
		zero = true
		if err != nil && !errors.Is(err, ErrOutOfMemory) && !arena.Exhausted(err) && !errors.Is(err, ErrTooLarge) {
			if !errors.Is(err, arena.ErrNotStarted) {
				m.uncleared[i]++ // set aside, live until ReleaseUncleared
				m.unclearedBytes[i] += uint64(n)
			}
			return
		}
	case x == 2:
		var ok bool
		if p, ok = h.TryAlloc(n); !ok {
			return
		}
	default:
		p, err = h.Alloc(n)
	}
	if errors.Is(err, ErrOutOfMemory) || arena.Exhausted(err) || errors.Is(err, arena.ErrMemlock) || errors.Is(err, ErrTooLarge) {
		return // a small arena fills, and the provider's budget runs out
	}
	if err != nil {
		m.fail("heap %d alloc %d: %v", i, n, err)
	}
	if p%h.align != 0 {
		m.fail("heap %d: %#x not aligned to %d", i, p, h.align)
	}
	if m.sh == nil {
		m.sh = m.regionShadow(p)
	}
	m.shMu.Lock()
	m.sh.mark(m.t, p, n, true)
	m.shMu.Unlock()
	if q, bad := m.prov.uncommitted(p, n); bad {
		m.fail("heap %d: new block [%#x, +%d) has page %#x uncommitted", i, p, n, q)
	}
	if m.join != nil && !m.join.inOneUnit(p, n) {
		m.fail("heap %d: new block [%#x, +%d) in no one unit", i, p, n)
	}
	if zero {
		for j, v := range mem.Bytes(p, n) {
			if v != 0 {
				m.fail("zalloc [%#x, +%d): byte %d is %#x", p, n, j, v)
			}
		}
	}
	b := modelBlock{liveBlock: liveBlock{p, n, byte(m.step)}, h: i}
	fill(b.liveBlock, false)
	m.live = append(m.live, b)
}

// handOff gives live block j to the remote freer, which checks its bytes and frees it with
// Group.Free while the owners go on.
func (m *groupModel) handOff(j int) {
	b := m.live[j]
	m.live[j] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
	m.flight.Add(1)
	m.remote <- b
}

// remoteFreer frees the blocks handOff sends it, from its own goroutine.
func (m *groupModel) remoteFreer() {
	for b := range m.remote {
		err := error(nil)
		if bad := fill(b.liveBlock, true); bad > 0 {
			err = fmt.Errorf("remote free: block [%#x, +%d) of heap %d has %d corrupted bytes", b.p, b.n, b.h, bad)
		}
		m.shMu.Lock()
		if _, ok := m.sh.flip(b.p, b.n, false); !ok && err == nil {
			err = fmt.Errorf("remote free: block [%#x, +%d) not live in the shadow", b.p, b.n)
		}
		m.shMu.Unlock()
		free := m.g.Free
		if b.held {
			free = func(p uintptr) error { return m.g.FreeHeld(p, b.n) }
		}
		if e := free(b.p); e != nil && err == nil {
			err = fmt.Errorf("remote free of [%#x, +%d) of heap %d: %w", b.p, b.n, b.h, e)
		}
		if err != nil {
			select {
			case m.errs <- err:
			default:
			}
		}
		m.flight.Done()
	}
}

// drain waits for the remote freer to free every block handed to it.
func (m *groupModel) drain() {
	m.flight.Wait()
	select {
	case err := <-m.errs:
		m.fail("%v", err)
	default:
	}
}

// hold holds live block j (Group.Hold from inside it, HoldSized, or its owner's TryHoldSized)
// or, held already, now and then ends the hold (Unhold).
func (m *groupModel) hold(j int) {
	b := &m.live[j]
	if b.held && m.r.IntN(2) == 0 {
		if err := m.g.Unhold(b.p, b.n); err != nil {
			m.fail("unhold [%#x, +%d): %v", b.p, b.n, err)
		}
		b.held = false
		return
	}
	var first bool
	var err error
	switch m.r.IntN(3) {
	case 0:
		var base, size uintptr
		base, size, first, err = m.g.Hold(b.p + uintptr(m.r.IntN(int(b.n))))
		if err == nil && (base != b.p || size != b.n) {
			m.fail("hold inside [%#x, +%d) found [%#x, +%d)", b.p, b.n, base, size)
		}
	case 1:
		first, err = m.g.HoldSized(b.p, b.n)
	default:
		h := m.heap(b.h)
		if h == nil {
			return
		}
		var ok bool
		if first, ok = h.TryHoldSized(b.p, b.n); !ok {
			return
		}
	}
	if err != nil {
		m.fail("hold [%#x, +%d): %v", b.p, b.n, err)
	}
	if first == b.held {
		m.fail("hold [%#x, +%d): first %v, but held %v before", b.p, b.n, first, b.held)
	}
	b.held = true
}

// tryFree frees live block j with TryFree by its owner or another heap; where it refuses,
// nothing must have changed (a held block is always refused).
func (m *groupModel) tryFree(j int) {
	b := m.live[j]
	h := m.heap(b.h)
	if m.r.IntN(3) == 0 {
		h = m.heap((b.h + 1) % len(m.hs))
	}
	if h == nil {
		return
	}
	if bad := fill(b.liveBlock, true); bad > 0 {
		m.fail("block [%#x, +%d) of heap %d has %d corrupted bytes", b.p, b.n, b.h, bad)
	}
	freed, held := h.TryFreeOrHeld(b.p, b.n)
	if b.held && freed {
		m.fail("TryFree freed held [%#x, +%d)", b.p, b.n)
	}
	if held && !b.held {
		m.fail("TryFree found [%#x, +%d) held", b.p, b.n)
	}
	if !freed {
		return
	}
	m.shMu.Lock()
	m.sh.mark(m.t, b.p, b.n, false)
	m.shMu.Unlock()
	m.live[j] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
}

// clearInShadow reports whether no live block touches [p, p+n).
func (m *groupModel) clearInShadow(p, n uintptr) bool {
	m.shMu.Lock()
	defer m.shMu.Unlock()
	if _, ok := m.sh.flip(p, n, true); !ok {
		return false
	}
	m.sh.flip(p, n, false)
	return true
}

// regionShadow makes the shadow of the arena's one region, found from p.
func (m *groupModel) regionShadow(p uintptr) *shadow {
	for _, rs := range m.a.Snapshot().Regions {
		if p >= rs.Base && p < rs.Base+rs.Size {
			return newShadow(rs.Base&^15, rs.Size+16) // granules of 16 bytes from 0: a base may be off them
		}
	}
	m.fail("%#x in no region", p)
	return nil
}

// free frees live block j: how picks the owner's Free, FreeSized, another heap's Free, the
// group's Free or the group's FreeSized.
func (m *groupModel) free(j, how int) {
	b := m.live[j]
	if bad := fill(b.liveBlock, true); bad > 0 {
		m.fail("block [%#x, +%d) of heap %d has %d corrupted bytes", b.p, b.n, b.h, bad)
	}
	if base, size, err := m.g.Block(b.p + b.n/2); err != nil || base != b.p || size != b.n {
		m.fail("Block(%#x) = %#x, %d, %v; want %#x, %d", b.p+b.n/2, base, size, err, b.p, b.n)
	}
	if size, err := m.g.Size(b.p); err != nil || size != b.n {
		m.fail("Size(%#x) = %d, %v; want %d", b.p, size, err, b.n)
	}
	if o, err := m.g.Owner(b.p); err != nil || o != m.hs[b.h] {
		m.fail("Owner(%#x) = %v, %v; want heap %d", b.p, o, err, b.h)
	}
	if x, err := m.g.Extent(b.p); err != nil || x < b.n {
		m.fail("Extent(%#x) = %d, %v; want %d at least", b.p, x, err, b.n)
	} else if q, bad := m.prov.uncommitted(b.p, x); bad {
		m.fail("Extent(%#x) = %d reaches page %#x, uncommitted", b.p, x, q)
	} else if end := (b.p + b.n + 15) &^ 15; b.p+x > end && !m.clearInShadow(end, b.p+x-end) {
		m.fail("Extent(%#x) = %d covers another live block (asked %d)", b.p, x, b.n)
	} else if m.g.Held(b.p) != b.held {
		m.fail("Held(%#x) = %v, want %v", b.p, !b.held, b.held)
	}
	var err error
	if b.held {
		if err := m.g.Free(b.p); !errors.Is(err, ErrHeld) {
			m.fail("free of held [%#x, +%d): %v, want ErrHeld", b.p, b.n, err)
		}
		how += 5
	}
	if m.heap(b.h) == nil || m.heap((b.h+1)%len(m.hs)) == nil {
		how = how/5*5 + 3 // the group's
	}
	switch how {
	case 5, 7:
		err = m.hs[b.h].FreeHeld(b.p, b.n)
	case 6, 8, 9:
		err = m.g.FreeHeld(b.p, b.n)
	case 0:
		err = m.hs[b.h].Free(b.p)
	case 1:
		err = m.hs[b.h].FreeSized(b.p, b.n)
	case 2:
		err = m.hs[(b.h+1)%len(m.hs)].Free(b.p)
	case 3:
		err = m.g.Free(b.p)
	default:
		err = m.g.FreeSized(b.p, b.n)
	}
	if err != nil {
		m.fail("free (%d) of [%#x, +%d) of heap %d: %v", how, b.p, b.n, b.h, err)
	}
	m.shMu.Lock()
	m.sh.mark(m.t, b.p, b.n, false)
	m.shMu.Unlock()
	m.live[j] = m.live[len(m.live)-1]
	m.live = m.live[:len(m.live)-1]
	m.freed = append(m.freed, b.p)
	if len(m.freed) > 64 {
		m.freed = m.freed[1:]
	}
}

// close closes heap i: refused with ErrLiveBlocks while it has live blocks, with every block
// left as it was; otherwise done, and a new heap takes the slot. The lender is closed only
// when its borrower is too (the borrower first).
func (m *groupModel) close(i int) {
	m.drain()
	nlive := m.uncleared[i]
	for _, b := range m.live {
		if b.h == i {
			nlive++
		}
	}
	if i == 0 && nlive == 0 {
		return // the lender: see SetLender
	}
	err := m.hs[i].Close()
	if nlive > 0 {
		if !errors.Is(err, ErrLiveBlocks) {
			m.fail("close of heap %d with %d live blocks: %v, want ErrLiveBlocks", i, nlive, err)
		}
		if st := m.hs[i].Stats(); st.Live != uint64(nlive) {
			m.fail("heap %d after a refused close: %d live, want %d", i, st.Live, nlive)
		}
		return
	}
	if err != nil {
		m.fail("close of empty heap %d: %v", i, err)
	}
	if _, err := m.hs[i].Alloc(64); !errors.Is(err, ErrClosed) {
		m.fail("alloc from closed heap %d: %v, want ErrClosed", i, err)
	}
	m.hs[i] = m.newHeap(i)
	if i == 1 {
		m.hs[1].SetLender(m.lend)
	}
}

// badFree frees an address that is no live block's start: one freed lately, one inside a live
// block, one outside the arena. Each must fail and change nothing.
func (m *groupModel) badFree() {
	m.drain() // a block in flight is live
	r := m.r
	var p uintptr
	switch r.IntN(3) {
	case 0:
		if len(m.freed) == 0 || slices.ContainsFunc(m.uncleared, func(n int) bool { return n > 0 }) {
			return // a block set aside by a failed clear, which the model does not know, is live
		}
		p = m.freed[r.IntN(len(m.freed))]
	case 1:
		if len(m.live) == 0 {
			return
		}
		b := m.live[r.IntN(len(m.live))]
		if b.n < 2 {
			return
		}
		p = b.p + 1 + uintptr(r.IntN(int(b.n-1)))
	default:
		p = uintptr(0x1000 + r.IntN(1<<20)*16)
	}
	for _, b := range m.live {
		if b.p == p {
			return // reused since
		}
	}
	var err error
	switch r.IntN(3) {
	case 0:
		err = m.g.Free(p)
	case 1:
		err = m.hs[1+r.IntN(len(m.hs)-1)].Free(p)
	default:
		err = m.g.FreeSized(p, 64)
	}
	if err == nil {
		m.fail("bad free of %#x succeeded", p)
	}
	if !errors.Is(err, ErrDoubleFree) && !errors.Is(err, ErrInteriorPointer) && !errors.Is(err, ErrNotOwned) && !errors.Is(err, ErrSizeMismatch) {
		m.fail("bad free of %#x: %v", p, err)
	}
}

// check verifies that every live block lies in committed memory and, when full is set, that
// each heap's Stats agree with the model.
func (m *groupModel) check(full bool) {
	for _, b := range m.live {
		if q, bad := m.prov.uncommitted(b.p, b.n); bad {
			m.fail("live block [%#x, +%d) of heap %d has page %#x uncommitted", b.p, b.n, b.h, q)
		}
		if m.join != nil && !m.join.inOneUnit(b.p, b.n) {
			m.fail("live block [%#x, +%d) of heap %d in no one unit", b.p, b.n, b.h)
		}
	}
	if !full {
		return
	}
	// The arena's Committed is the provider's (read between two equal readings of the arena's:
	// its purge timer decommits under its lock).
	before := m.a.Usage().Committed
	m.prov.mu.Lock()
	npages := len(m.prov.pages)
	m.prov.mu.Unlock()
	if after := m.a.Usage().Committed; after == before && after != uint64(npages)*4096 {
		m.fail("the arena's Committed is %d, the provider's %d", int64(after), npages*4096)
	}
	nlive := make([]uint64, len(m.hs))
	inUse := make([]uint64, len(m.hs))
	for _, b := range m.live {
		nlive[b.h]++
		inUse[b.h] += uint64(b.n)
	}
	for i, h := range m.hs {
		if m.heap(i) == nil {
			continue
		}
		st := h.Stats()
		nl, iu := nlive[i]+uint64(m.uncleared[i]), inUse[i]+m.unclearedBytes[i]
		if st.Live != nl || st.InUse != iu || st.Uncleared != m.uncleared[i] || st.UnclearedBytes != m.unclearedBytes[i] {
			m.fail("heap %d: Stats Live %d InUse %d Uncleared %d (%d bytes); the model %d, %d, %d (%d bytes)",
				i, st.Live, st.InUse, st.Uncleared, st.UnclearedBytes, nl, iu, m.uncleared[i], m.unclearedBytes[i])
		}
		if err := h.verifyWith(true); err != nil {
			m.fail("heap %d: %v", i, err)
		}
	}
}
