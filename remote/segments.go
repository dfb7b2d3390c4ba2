package remote

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// segmentSource is a SegmentSource's provider: see Worker.SegmentSource.
type segmentSource struct {
	w    *Worker
	opts SegmentOptions
	page uintptr

	mu      sync.Mutex
	byBase  map[uintptr]*segment
	locked  int64 // bytes locked now
	created uint64
}

// SegmentOptions configures a Worker's SegmentSource.
type SegmentOptions struct {
	// Pageable leaves the segments' pages unlocked (arena.HostPageable): for a memlock limit
	// below the pool's size (an ordinary user's 8 MiB). By default each committed range is
	// locked with mlock, as a Locked pool's are (arena.HostLocked), and a limit that refuses
	// it is an error matching pinmalloc.ErrMemlock.
	Pageable bool
}

// segment is a region of a segmentSource: the UCX allocation behind it.
type segment struct {
	w         *Worker
	mem       ucx.Mem
	base, len uintptr
	inode     uint64 // the SysV segment's id, as /proc/self/maps names it (0: not SysV)
	held      bool   // UCX may hold requests naming it (Registration.Unmapping): freed after the worker, under w.mu
}

// segmentOf returns region g's segment when it is one of w's sources'. Under w.mu.
func (w *Worker) segmentOf(g *arena.Region) *segment {
	if seg, ok := g.Handle.(*segment); ok && seg.w == w {
		return seg
	}
	return nil
}

// closeContext destroys UCX's context once the worker is closed and no segment of it is left.
// Under w.mu.
func (w *Worker) closeContext() {
	if w.closed && w.segments == 0 && !w.abandoned && !w.ctxClosed {
		w.ctxClosed = true
		w.ctx.Close()
	}
}

// SegmentSource returns where a pool's regions come from when its peers on this host are to
// put and get at the speed of a memory copy: memory UCX allocates for the worker (ucp_mem_map
// with UCP_MEM_MAP_ALLOCATE), a shared segment (SysV with UCX_TLS=sm and UCX's default
// UCX_ALLOC_PRIO) that a peer's worker maps into its own address space when it unpacks the
// region's key. A transfer of such a peer into or out of it is then one copy by the peer's
// CPU, checked against the kernel's mapping of the segment (docs/ucx.md), where a pool of
// ordinary memory is reached by messages. Use it as pinned.Options.Source (with the default
// Locked backend), and register the pool with the same worker:
//
//	src := w.SegmentSource(remote.SegmentOptions{})
//	pool, err := pinned.New(pinned.Options{Source: src, Capacity: 1 << 30})
//	reg, err := w.Register(pool) // the segments are registered already: nothing is mapped again
//
// Each region is one segment of the region's size, allocated when the pool grows and freed
// when the pool is closed; its pages are taken as the pool commits them (locked then, unless
// SegmentOptions.Pageable). The worker's UCX context lives until the last segment is freed,
// so the pool may outlive the worker's Close.
func (w *Worker) SegmentSource(o SegmentOptions) arena.Provider {
	return &segmentSource{w: w, opts: o, page: uintptr(unix.Getpagesize()), byBase: map[uintptr]*segment{}}
}

// Name implements arena.Provider.
func (s *segmentSource) Name() string { return "ucx-segment" }

// Kind implements arena.Provider: locked host memory, or pageable with SegmentOptions.Pageable.
func (s *segmentSource) Kind() arena.Kind {
	if s.opts.Pageable {
		return arena.HostPageable
	}
	return arena.HostLocked
}

// Caps implements arena.Provider: committed ranges are locked (or nothing is done), never
// decommitted; the segment's pages come as they are touched.
func (s *segmentSource) Caps() arena.Caps {
	return arena.Caps{Granule: s.page, Splits: !s.opts.Pageable}
}

// Reserve implements arena.Provider: one segment of size bytes, allocated by UCX and
// registered with the worker's context.
func (s *segmentSource) Reserve(size, _ uintptr) (*arena.Region, error) {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return nil, fmt.Errorf("%w: the worker is closed", arena.ErrReserve)
	}
	m, base, n, err := w.ctx.MemAlloc(size)
	if err != nil {
		return nil, fmt.Errorf("%w: %d bytes of UCX-allocated memory: %w", arena.ErrReserve, size, err)
	}
	seg := &segment{w: w, mem: m, base: base, len: n}
	if mp, ok := findMapping(base); ok && mp.sysv() {
		seg.inode = mp.inode
		if w.selfSysV == nil {
			w.selfSysV = map[uint64]bool{}
		}
		w.selfSysV[mp.inode] = true
	}
	w.segments++
	s.mu.Lock()
	s.byBase[base] = seg
	s.created++
	s.mu.Unlock()
	w.logf("remote: allocated segment [%#x, +%d) (SysV id %d)", base, n, seg.inode)
	return &arena.Region{Base: base, Size: size, Zeroed: true, Handle: seg}, nil
}

// mlock is mlock(2); tests make it fail part-way.
var mlock = unix.Mlock

// Commit implements arena.Provider: it locks the range, unless the source is pageable.
func (s *segmentSource) Commit(r *arena.Region, off, size uintptr) error {
	if err := r.CheckRange(off, size); err != nil {
		return err
	}
	if s.opts.Pageable {
		return nil
	}
	if err := mlock(mem.Bytes(r.Base+off, size)); err != nil {
		// An mlock that fails part-way leaves the pages before the failure locked, charged
		// to RLIMIT_MEMLOCK, and no Decommit follows a failed Commit: unlock the range
		// (harmless on pages not locked).
		_ = unix.Munlock(mem.Bytes(r.Base+off, size))
		var lim unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
		s.mu.Lock()
		locked := s.locked
		s.mu.Unlock()
		return fmt.Errorf("%w: mlock of %d bytes of a UCX segment: %w (limit %d, this source holds %d locked; SegmentOptions.Pageable leaves them unlocked)", arena.ErrMemlock, size, err, lim.Cur, locked)
	}
	s.mu.Lock()
	s.locked += int64(size)
	s.mu.Unlock()
	return nil
}

// Decommit implements arena.Provider; the arena never calls it (Caps.Decommits is unset).
func (s *segmentSource) Decommit(r *arena.Region, off, size uintptr) error {
	return fmt.Errorf("%w: a UCX segment is not decommitted", arena.ErrInvalid)
}

// Release implements arena.Provider: the segment is deregistered and freed by UCX (its pages
// unlocked with it). A peer that still maps it keeps its pages until it lets go.
func (s *segmentSource) Release(r *arena.Region) error {
	seg, ok := r.Handle.(*segment)
	s.mu.Lock()
	if !ok || s.byBase[r.Base] != seg {
		s.mu.Unlock()
		return fmt.Errorf("%w: region [%#x, +%d) is not one of this source's", arena.ErrInvalid, r.Base, r.Size)
	}
	delete(s.byBase, r.Base)
	if !s.opts.Pageable {
		s.locked -= int64(r.Size) // at most: munlock of pages never locked is harmless
	}
	s.mu.Unlock()
	var err error
	if !s.opts.Pageable {
		err = unix.Munlock(mem.Bytes(r.Base, r.Size))
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if seg.held && !w.destroyed {
		w.leaked = append(w.leaked, seg.mem) // unmapped once the worker is destroyed (Close)
	} else {
		err = errors.Join(err, w.ctx.MemUnmap(seg.mem))
	}
	delete(w.selfSysV, seg.inode)
	w.segments--
	w.closeContext()
	return err
}

// Regions returns the number of segments the source holds now.
func (s *segmentSource) Regions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byBase)
}
