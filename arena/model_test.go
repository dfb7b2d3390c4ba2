package arena

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// strictProvider is pageable host memory that reports a commit granule of its own (16 KiB and
// 64 KiB as on arm64 kernels, 2 MiB as CUDA's VMM) and is as strict as a VMM driver: a commit
// of a host page committed already, a decommit of one that is not, and a call off the granule
// are errors (recorded, and failing the test). It counts its committed pages, for the
// arena's Stats to agree with.
type strictProvider struct {
	Provider
	granule uintptr
	mu      sync.Mutex
	base    uintptr          // the first region's
	pages   map[uintptr]bool // host page, as an offset from base → committed
	errs    []error
}

func newStrictProvider(granule uintptr) *strictProvider {
	return &strictProvider{Provider: PageableHost(HostOptions{}), granule: granule, pages: map[uintptr]bool{}}
}

func (p *strictProvider) Caps() Caps {
	c := p.Provider.Caps()
	c.Granule = max(c.Granule, p.granule)
	return c
}

func (p *strictProvider) flip(r *Region, off, size uintptr, on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	switch {
	case off%p.granule != 0 || size%p.granule != 0 || size == 0:
		err = fmt.Errorf("[%#x, +%#x) off the granule %#x", off, size, p.granule)
	case off+size > r.Size:
		err = fmt.Errorf("[%#x, +%#x) past the region's %#x bytes", off, size, r.Size)
	default:
		if p.base == 0 {
			p.base = r.Base
		}
		for a := r.Base + off; a < r.Base+off+size; a += 4096 {
			if p.pages[a-p.base] == on {
				err = fmt.Errorf("page %#x (of [%#x, +%#x)) committed %v already", a, r.Base+off, size, on)
				break
			}
		}
	}
	if err != nil {
		p.errs = append(p.errs, err)
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for a := r.Base + off; a < r.Base+off+size; a += 4096 {
		if on {
			p.pages[a-p.base] = true
		} else {
			delete(p.pages, a-p.base)
		}
	}
	return nil
}

func (p *strictProvider) Commit(r *Region, off, size uintptr) error {
	if err := p.flip(r, off, size, true); err != nil {
		return err
	}
	if err := p.Provider.Commit(r, off, size); err != nil {
		_ = p.flip(r, off, size, false)
		return err
	}
	return nil
}

func (p *strictProvider) Decommit(r *Region, off, size uintptr) error {
	if err := p.flip(r, off, size, false); err != nil {
		return err
	}
	return p.Provider.Decommit(r, off, size)
}

func (p *strictProvider) committed(a, n uintptr) (uintptr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for o := (a - p.base) &^ 4095; p.base+o < a+n; o += 4096 {
		if !p.pages[o] {
			return p.base + o, false
		}
	}
	return 0, true
}

// modelSpan is a span of the arena model with the granules its user has claimed (Alloc,
// Commit) and not given up (Decommit), whose bytes hold its pattern.
type modelSpan struct {
	s      Span
	lo, hi uintptr // the span's chunks (the last may end short, at the region's end)
	claim  map[uintptr]bool
	seed   byte
}

// clip returns the part of [q, q+g) inside the span's chunks.
func (ms *modelSpan) clip(q, g uintptr) (lo, hi uintptr) { return max(q, ms.lo), min(q+g, ms.hi) }

// TestArenaModel runs random sequences of Alloc (any size and alignment), Reserve, ReserveNext,
// Commit, Decommit, DecommitIdle, Free, Precommit and Trim over small arenas of host memory with
// granules of 4 KiB, 16 KiB, 64 KiB and 2 MiB and chunks of 64 KiB to 2 MiB, and of an exclusive
// external region off a page (its chunks share granules), each with and without a purge delay. It
// checks that no two spans share a chunk, that every range a span's user claimed is committed and
// wanted (every 8th step) and keeps its bytes (at its free), that the provider is never asked to
// commit what is committed or decommit what is not, and that the arena's Committed is the
// provider's (every step). 2,000 steps per case (1,000 under the race detector, which makes a
// step several times dearer); 6,000, with two seeds, in the long form (PINMALLOC_LONG=1), which
// CI's time allows.
func TestArenaModel(t *testing.T) {
	steps, seeds := 2_000, uint64(1)
	switch {
	case os.Getenv("PINMALLOC_LONG") != "" && !testing.Short():
		steps, seeds = 6_000, 2
	case raceEnabled:
		steps = 1_000
	}
	for _, c := range []struct{ granule, chunk uintptr }{
		{4 << 10, 2 << 20}, {16 << 10, 2 << 20}, {64 << 10, 2 << 20}, {2 << 20, 2 << 20},
		{4 << 10, 64 << 10}, {64 << 10, 64 << 10}, {16 << 10, 256 << 10},
		{external, 2 << 20}, {external, 64 << 10},
	} {
		for _, delay := range []time.Duration{-1, time.Millisecond} {
			for seed := uint64(1); seed <= seeds; seed++ {
				t.Run(fmt.Sprintf("granule=%d/chunk=%d/delay=%v/seed=%d", c.granule, c.chunk, delay, seed), func(t *testing.T) {
					arenaModel(t, c.granule, c.chunk, delay, seed, steps)
				})
			}
		}
	}
}

// external names, among TestArenaModel's granules, an exclusive external region off a page.
const external = 1

func arenaModel(t *testing.T, granule, chunk uintptr, delay time.Duration, seed uint64, steps int) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	capacity := 24 * chunk
	prov := newStrictProvider(granule)
	if granule == external {
		// An exclusive external region 8 bytes past a page: its granules straddle pages, and
		// its chunks the 2 MiB grid.
		r := offPageRegion(t, capacity+chunk, true)
		e, err := External(r)
		if err != nil {
			t.Fatal(err)
		}
		prov = &strictProvider{Provider: e, granule: 4096, pages: map[uintptr]bool{}}
		capacity = e.Capacity()
	}
	regionSize := 8 * chunk
	if granule == external {
		regionSize = capacity
	}
	a, err := New(Options{Provider: prov, Capacity: capacity, ChunkSize: chunk, RegionSize: regionSize, PurgeDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 5))
	var spans []*modelSpan
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: %s", step, fmt.Sprintf(format, args...))
	}
	// base returns the base of p's region: granules count from it.
	base := func(p uintptr) uintptr {
		for _, rs := range a.Snapshot().Regions {
			if p >= rs.Base && p < rs.Base+rs.Size {
				return rs.Base
			}
		}
		t.Fatalf("%#x in no region", p)
		return 0
	}
	g := prov.Caps().Granule
	// granules returns the granules [lo, hi) that [p, p+n) touches (whole: that lie inside it).
	granules := func(p, n uintptr, whole bool) (lo, hi uintptr) {
		b := base(p)
		if whole {
			return b + (p-b+g-1)/g*g, b + (p+n-b)/g*g
		}
		return b + (p-b)/g*g, b + (p+n-b+g-1)/g*g
	}
	claimRange := func(ms *modelSpan, p, n uintptr, on bool) {
		lo, hi := granules(p, n, !on) // given up: whole granules only
		for q := lo; q < hi; q += g {
			if on {
				ms.claim[q] = true
			} else {
				delete(ms.claim, q)
			}
		}
	}
	// pattern writes (or checks) a byte at the start and end of claimed granule q.
	// (clipped to the span's chunks: a granule of a region off a page may straddle a chunk's
	// edge, and the part beyond is another span's).
	pattern := func(ms *modelSpan, q uintptr, check bool) int {
		lo, hi := ms.clip(q, g)
		b := mem.Bytes(lo, hi-lo)
		v := ms.seed + byte(q>>12)
		if check {
			if b[0] != v || b[len(b)-1] != ^v {
				return 1
			}
		} else {
			b[0], b[len(b)-1] = v, ^v
		}
		return 0
	}
	add := func(step int, s Span, commit bool) {
		lo, ok := a.ChunkBase(s.ID)
		if !ok {
			fail(step, "span %+v: no base for its first chunk", s)
		}
		b := base(lo)
		rs := a.Snapshot().Regions
		hi := lo + uintptr(s.N)*chunk
		for _, x := range rs {
			if x.Base == b {
				hi = min(hi, x.Base+x.Size)
			}
		}
		ms := &modelSpan{s: s, lo: lo, hi: hi, claim: map[uintptr]bool{}, seed: byte(step)}
		for _, o := range spans {
			if ms.lo < o.hi && o.lo < ms.hi {
				fail(step, "span %+v shares a chunk with %+v", s, o.s)
			}
		}
		if commit {
			claimRange(ms, s.Base, s.Size, true)
			for q := range ms.claim {
				pattern(ms, q, false)
			}
		}
		spans = append(spans, ms)
	}
	// pick picks a span of the model, and a range in it of at most most bytes.
	pick := func(most uintptr) (ms *modelSpan, p, n uintptr) {
		ms = spans[r.IntN(len(spans))]
		p = ms.lo + uintptr(r.IntN(int(ms.hi-ms.lo)))
		return ms, p, uintptr(1 + r.IntN(int(min(ms.hi-p, most))))
	}
	for step := range steps {
		switch k := r.IntN(100); {
		case k < 25 || len(spans) == 0:
			var size uintptr
			switch x := r.IntN(10); {
			case x < 3:
				size = uintptr(1 + r.IntN(4096))
			case x < 6:
				size = uintptr(1 + r.IntN(int(chunk/4)))
			case x < 9:
				size = uintptr(1 + r.IntN(int(chunk)))
			default:
				size = uintptr(1 + r.IntN(int(3*chunk)))
			}
			al := uintptr(1) << r.IntN(24)
			var s Span
			var err error
			reserve := r.IntN(3) == 0
			if reserve {
				s, err = a.Reserve(size, al)
			} else {
				s, err = a.Alloc(size, al)
			}
			if errors.Is(err, ErrCapacity) {
				continue
			}
			if err != nil {
				fail(step, "alloc %d aligned %d: %v", size, al, err)
			}
			if s.Base%al != 0 || s.Size != size {
				fail(step, "span %+v for %d aligned %d", s, size, al)
			}
			add(step, s, !reserve)
		case k < 30:
			ms := spans[r.IntN(len(spans))]
			n := 1 + r.IntN(3)
			s, err := a.ReserveNext(ms.s, n)
			if errors.Is(err, ErrCapacity) {
				continue
			}
			if err != nil {
				fail(step, "reserve next %d of %+v: %v", n, ms.s, err)
			}
			add(step, s, false)
		case k < 50:
			ms, p, n := pick(3 * g)
			if _, err := a.Commit(p, n); err != nil {
				fail(step, "commit [%#x, +%d) of %+v: %v", p, n, ms.s, err)
			}
			lo, hi := granules(p, n, false)
			for q := lo; q < hi; q += g {
				if !ms.claim[q] {
					ms.claim[q] = true
					pattern(ms, q, false)
				}
			}
		case k < 62:
			ms, p, n := pick(4 * g)
			var err error
			if r.IntN(2) == 0 {
				err = a.Decommit(p, n)
			} else {
				err = a.DecommitIdle(p, n)
			}
			if err != nil {
				fail(step, "decommit [%#x, +%d) of %+v: %v", p, n, ms.s, err)
			}
			claimRange(ms, p, n, false)
		case k < 85:
			i := r.IntN(len(spans))
			ms := spans[i]
			for q := range ms.claim {
				if bad := pattern(ms, q, true); bad > 0 {
					fail(step, "span %+v: granule %#x lost its bytes", ms.s, q)
				}
			}
			if err := a.Free(ms.s); err != nil {
				fail(step, "free %+v: %v", ms.s, err)
			}
			spans[i] = spans[len(spans)-1]
			spans = spans[:len(spans)-1]
		case k < 88:
			if _, err := a.Precommit(uintptr(1+r.IntN(4)) * chunk); err != nil {
				fail(step, "precommit: %v", err)
			}
		case k < 93:
			a.Trim()
		case delay > 0:
			time.Sleep(time.Duration(r.IntN(1500)) * time.Microsecond)
		}
		// Every claimed granule is committed and wanted (every 8th step: it costs).
		for _, ms := range spans {
			if step%8 != 0 {
				break
			}
			for q := range ms.claim {
				if pg, ok := prov.committed(q, g); !ok {
					fail(step, "span %+v: claimed granule %#x has page %#x uncommitted", ms.s, q, pg)
				}
				if lo, hi := ms.clip(q, g); !a.Wanted(lo, hi-lo) {
					fail(step, "span %+v: claimed granule %#x not wanted", ms.s, q)
				}
			}
		}
		// The purge timer decommits under the arena's lock: a count taken between two equal
		// readings of the arena's is the provider's at that time.
		before := a.Usage().Committed
		prov.mu.Lock()
		errs, npages := prov.errs, len(prov.pages)
		prov.mu.Unlock()
		if len(errs) > 0 {
			fail(step, "the provider was asked: %v", errs)
		}
		if after := a.Usage().Committed; after == before && after != uint64(npages)*4096 {
			fail(step, "arena committed %d, the provider %d", after, npages*4096)
		}
	}
	for _, ms := range spans {
		if err := a.Free(ms.s); err != nil {
			t.Fatalf("free %+v: %v", ms.s, err)
		}
	}
	a.Trim()
	if st := a.Usage(); st.Committed != 0 || st.InUseChunks != 0 {
		t.Fatalf("after freeing all and Trim: %+v", st)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(prov.errs) > 0 {
		t.Fatalf("the provider was asked: %v", prov.errs)
	}
}
