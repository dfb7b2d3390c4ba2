package arena

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/numa"
)

// HugePages selects how host memory is backed by huge pages.
type HugePages uint8

const (
	// HugeNone uses ordinary 4 KiB pages.
	HugeNone HugePages = iota
	// HugeTransparent asks for transparent huge pages with madvise(MADV_HUGEPAGE). The kernel
	// uses them when it can; nothing fails when it cannot.
	HugeTransparent
	// HugeTLB maps regions with MAP_HUGETLB (2 MiB pages from the kernel's hugetlb pool).
	// When the pool is empty or absent the provider falls back to ordinary pages and counts
	// the fallback in its stats.
	HugeTLB
	// HugeSmall uses ordinary 4 KiB pages where a provider would otherwise advise transparent
	// huge pages (the CUDA registration provider does by default), and advises the kernel
	// against them (MADV_NOHUGEPAGE).
	HugeSmall
)

// String names the setting.
func (h HugePages) String() string {
	switch h {
	case HugeNone:
		return "none"
	case HugeTransparent:
		return "transparent"
	case HugeTLB:
		return "hugetlb"
	case HugeSmall:
		return "small"
	}
	return fmt.Sprintf("huge(%d)", uint8(h))
}

// HostOptions configures the host providers.
type HostOptions struct {
	// HugePages selects huge-page backing (default none).
	HugePages HugePages
	// Populate commits each region in full when it is reserved (MAP_POPULATE, and mlock for
	// locked memory), so no commit happens later. The arena then never decommits it.
	Populate bool
	// Node binds every region to a host NUMA node before its pages are first touched (mbind):
	// NUMANode(n). Locked memory is bound strictly (MPOL_BIND: a full node fails the
	// commit), pageable memory preferably (MPOL_PREFERRED). The zero NUMANearest binds
	// nothing: the kernel places pages where the thread that touches them runs.
	Node NUMA
}

// HostCounters counts the system calls a host provider has made. Tests use it to prove that a
// steady state makes none.
type HostCounters struct {
	Mmap, Munmap, Mprotect, Mlock, Munlock, Madvise uint64
	// HugeTLBFallbacks counts regions that asked for MAP_HUGETLB and got ordinary pages.
	HugeTLBFallbacks uint64
	// LockedBytes is the memory the provider holds locked now.
	LockedBytes int64
}

// Total is the number of system calls counted.
func (c HostCounters) Total() uint64 {
	return c.Mmap + c.Munmap + c.Mprotect + c.Mlock + c.Munlock + c.Madvise
}

const hugeTLBSize = 2 << 20

// HostProvider hands out anonymous host memory from mmap, locked with mlock or pageable.
//
// Address space is reserved PROT_NONE and MAP_NORESERVE, over-reserved by the alignment and
// trimmed, so regions are aligned without costing memory. Commit makes a range readable and
// writable (and locks it); Decommit unlocks it, drops its pages with MADV_DONTNEED and protects
// it again, so a stray access to decommitted memory faults instead of silently committing. A
// Reserve that fails after its mmap (the NUMA bind, the populate) unmaps the region; where the
// munmap is refused its error says so too (GiveBackRefused), and the provider keeps the region
// and unmaps it again at its next Reserve or Release, or at ReleaseKept (Arena.Close).
//
// Each region is kept from a child forked without exec (madvise(MADV_DONTFORK), once, at
// Reserve): such a child (C code's fork through cgo) finds nothing mapped at the region's
// addresses, and touching them faults. Pinned pages shared copy-on-write with a child would
// be copied at the parent's next write, away from a registration's DMA, and locked memory
// would count twice. A child that execs is unaffected. A kernel that refuses the advice for
// the mapping (EINVAL) leaves the region passed to children, as before.
type HostProvider struct {
	locked bool
	opt    HostOptions
	page   uintptr
	strict bool // bind with MPOL_BIND even though the memory is not locked (Pinnable)

	mmap, munmap, mprotect, mlock, munlock, madvise, hugeFallback atomic.Uint64
	lockedBytes                                                   atomic.Int64

	// mlockFn, when set (tests), is called in place of mlock(2): a failure partway, which a
	// kernel's mlock can leave behind, made on demand.
	mlockFn func(b []byte) error
	// madviseFn, when set (tests), is called in place of madvise(2) by Decommit.
	madviseFn func(b []byte, advice int) error
	// munlockFn, when set (tests), is called in place of munlock(2) by Decommit.
	munlockFn func(b []byte) error
	// munmapFn, when set (tests), is called in place of munmap(2) by Release and by Reserve's
	// trim of its edges.
	munmapFn func(addr, size uintptr) error
	// noForkFn, when set (tests), is called in place of madvise(2) MADV_DONTFORK by Reserve.
	noForkFn func(b []byte) error

	keptMu sync.Mutex
	kept   []*Region // regions a failed Reserve could not unmap (unwind), unmapped again later
}

// LockedHost returns the default provider: host memory locked with mlock (page-locked, never
// swapped), subject to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK (pinned.Locked pools
// use it).
func LockedHost(o HostOptions) *HostProvider { return newHost(true, o) }

// PageableHost returns a provider of ordinary pageable host memory (pinned.Pageable pools use
// it).
func PageableHost(o HostOptions) *HostProvider { return newHost(false, o) }

// PinnableHost returns a provider of pageable host memory for a provider that pins it itself
// when it commits it (a registration with a driver, as package cudamem's HostRegister does): as
// PageableHost, but o.Node binds strictly (MPOL_BIND), as for locked memory, since pinning faults
// every page in at commit, so that a full node fails the commit instead of placing the memory
// elsewhere. FaultIn serves such a provider's Prefault.
func PinnableHost(o HostOptions) *HostProvider {
	h := newHost(false, o)
	h.strict = true
	return h
}

func newHost(locked bool, o HostOptions) *HostProvider {
	return &HostProvider{locked: locked, opt: o, page: pageSize()}
}

// Name implements Provider.
func (h *HostProvider) Name() string {
	if h.locked {
		return "locked"
	}
	return "pageable"
}

// Kind implements Provider.
func (h *HostProvider) Kind() Kind {
	if h.locked {
		return HostLocked
	}
	return HostPageable
}

// Caps implements Provider.
func (h *HostProvider) Caps() Caps {
	g := h.page
	if h.opt.HugePages == HugeTLB {
		g = hugeTLBSize
	}
	// Locking faults pages in, so locked memory commits faster in pieces on several threads;
	// pageable memory only changes protection.
	return Caps{Aligns: true, Decommits: !h.opt.Populate, ZeroOnCommit: true, Granule: g, Splits: h.locked}
}

// Counters returns the system calls made so far.
func (h *HostProvider) Counters() HostCounters {
	return HostCounters{
		Mmap: h.mmap.Load(), Munmap: h.munmap.Load(), Mprotect: h.mprotect.Load(),
		Mlock: h.mlock.Load(), Munlock: h.munlock.Load(), Madvise: h.madvise.Load(),
		HugeTLBFallbacks: h.hugeFallback.Load(), LockedBytes: h.lockedBytes.Load(),
	}
}

type hostRegion struct {
	mapBase, mapSize uintptr // what must be munmapped
	hugeTLB          bool
	released         atomic.Bool // claimed by a Release: one of two racing is refused
}

// Reserve implements Provider.
func (h *HostProvider) Reserve(size, alignment uintptr) (*Region, error) {
	if size == 0 || !align.IsPow2(alignment) {
		return nil, fmt.Errorf("%w: reserve %d bytes aligned to %d", ErrInvalid, size, alignment)
	}
	alignment = max(alignment, h.page)
	_ = h.ReleaseKept() // what is refused again stays kept, for Close to report
	var r *Region
	if h.opt.HugePages == HugeTLB {
		// The granule is a huge page whether or not the kernel has one to give: a region of
		// ordinary pages that falls back must be a whole number of them too.
		n, err := align.Up(size, hugeTLBSize)
		if err != nil {
			return nil, fmt.Errorf("%w: %d bytes: %w", ErrReserve, size, err)
		}
		size = n
		if r, err = h.reserveHugeTLB(size, alignment); err != nil {
			h.hugeFallback.Add(1)
		}
	}
	if r == nil {
		var err error
		if r, err = h.reserveTrimmed(size, alignment); err != nil {
			return nil, err
		}
	}
	if err := h.noFork(r); err != nil {
		return nil, h.unwind(r, err)
	}
	if node, ok := h.opt.Node.Node(); ok {
		if err := numa.Bind(r.Base, r.Size, node, h.locked || h.strict); err != nil {
			return nil, h.unwind(r, fmt.Errorf("%w: binding %d bytes to NUMA node %d: %w",
				ErrReserve, r.Size, node, err))
		}
	}
	if h.opt.Populate {
		if err := h.populate(r); err != nil {
			return nil, h.unwind(r, err)
		}
	}
	return r, nil
}

// unwind releases r, reserved by a Reserve that fails with err, and returns err, telling also
// of a release refused: the provider then keeps r, and releases it again later (ReleaseKept).
func (h *HostProvider) unwind(r *Region, err error) error {
	if rerr := h.release(r); rerr != nil {
		h.keep(r)
		return fmt.Errorf("%w; the %d bytes it mapped are kept, unmapped again later: %w",
			err, r.Size, rerr)
	}
	return err
}

// keep keeps r, a region of a failed Reserve that could not be unmapped, for ReleaseKept.
func (h *HostProvider) keep(r *Region) {
	h.keptMu.Lock()
	h.kept = append(h.kept, r)
	h.keptMu.Unlock()
}

// ReleaseKept implements KeptReleaser: it unmaps the regions of failed Reserves whose munmap
// was refused. The provider calls it at each Reserve and Release, and Arena.Close calls it;
// what is refused again stays kept, and the error says so, wrapping ErrCommit and the
// system's error.
func (h *HostProvider) ReleaseKept() error {
	h.keptMu.Lock()
	rs := h.kept
	h.kept = nil
	h.keptMu.Unlock()
	var errs []error
	for _, r := range rs {
		if err := h.release(r); err != nil {
			h.keep(r)
			errs = append(errs, fmt.Errorf("region [%#x, +%d) of a failed Reserve, kept: %w",
				r.Base, r.Size, err))
		}
	}
	return errors.Join(errs...)
}

// Node implements Placer: the node regions are bound to, or NodeUnknown.
func (h *HostProvider) Node() int {
	if n, ok := h.opt.Node.Node(); ok {
		return n
	}
	return NodeUnknown
}

// reserveTrimmed maps size bytes (rounded up to pages) aligned to alignment by mapping more
// and unmapping the head and the tail: address space is the only cost.
func (h *HostProvider) reserveTrimmed(size, alignment uintptr) (*Region, error) {
	n, err := align.Up(size, h.page)
	if err != nil {
		return nil, fmt.Errorf("%w: %d bytes: %w", ErrReserve, size, err)
	}
	size = n
	total, err := align.Add(size, alignment-h.page)
	if err != nil {
		return nil, fmt.Errorf("%w: %d bytes: %w", ErrReserve, size, err)
	}
	prot, flags := unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE
	if h.opt.Populate {
		prot = unix.PROT_READ | unix.PROT_WRITE
		if _, bound := h.opt.Node.Node(); !bound { // else populate faults it in once bound
			flags |= unix.MAP_POPULATE
		}
	}
	h.mmap.Add(1)
	p, err := unix.MmapPtr(-1, 0, nil, total, prot, flags)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %d bytes: %w", ErrReserve, total, err)
	}
	base := uintptr(p)
	start, _ := align.Up(base, alignment)
	// An edge the kernel refuses to unmap (ENOMEM: the split would pass vm.max_map_count)
	// stays with the region, for its Release to unmap: address space, and with Populate
	// memory, that no one would hold otherwise.
	mapBase, mapEnd := start, start+size
	if head := start - base; head > 0 && h.unmap(base, head) != nil {
		mapBase = base
	}
	if tail := base + total - mapEnd; tail > 0 && h.unmap(mapEnd, tail) != nil {
		mapEnd = base + total
	}
	switch h.opt.HugePages {
	case HugeTransparent:
		h.madvise.Add(1)
		_ = unix.Madvise(bytesAt(start, size), unix.MADV_HUGEPAGE) // advisory: THP may be off
	case HugeSmall:
		h.madvise.Add(1)
		_ = unix.Madvise(bytesAt(start, size), unix.MADV_NOHUGEPAGE)
	}
	return &Region{Base: start, Size: size, Zeroed: true,
		Handle: &hostRegion{mapBase: mapBase, mapSize: mapEnd - mapBase}}, nil
}

func (h *HostProvider) reserveHugeTLB(size, alignment uintptr) (*Region, error) {
	if alignment > hugeTLBSize {
		return nil, ErrInvalid // hugetlb mappings cannot be trimmed below their page size
	}
	size, err := align.Up(size, hugeTLBSize)
	if err != nil {
		return nil, err
	}
	h.mmap.Add(1)
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|(21<<unix.MAP_HUGE_SHIFT))
	if err != nil {
		return nil, err
	}
	return &Region{Base: uintptr(p), Size: size, Zeroed: true,
		Handle: &hostRegion{mapBase: uintptr(p), mapSize: size, hugeTLB: true}}, nil
}

// populate commits the whole region at reserve time.
func (h *HostProvider) populate(r *Region) error {
	if err := h.Commit(r, 0, r.Size); err != nil {
		return err
	}
	if _, bound := h.opt.Node.Node(); bound && !h.locked {
		// Mapped without MAP_POPULATE so that mbind came first: fault it in now.
		if err := h.FaultIn(r.Base, r.Size); err != nil {
			return err
		}
	}
	r.Committed = true
	return nil
}

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault the range in, writable.
const madvPopulateWrite = 23

// FaultIn faults the pages of [addr, addr+size), committed and not yet holding data, in for
// writing: with MADV_POPULATE_WRITE (the mm's lock taken for reading, so several threads fault
// pieces in side by side), or, on kernels without it, by writing a zero into each page. A
// provider that pins memory of Pinnable faults a span in this way on the arena's workers (its
// Prefault) before pinning it in one call.
func (h *HostProvider) FaultIn(addr, size uintptr) error {
	h.madvise.Add(1)
	err := unix.Madvise(bytesAt(addr, size), madvPopulateWrite)
	if errors.Is(err, unix.EINVAL) {
		b := bytesAt(addr, size)
		for i := uintptr(0); i < size; i += h.page {
			b[i] = 0
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: faulting %d bytes in: %w", ErrCommit, size, err)
	}
	return nil
}

func (h *HostProvider) unmap(addr, size uintptr) error {
	h.munmap.Add(1)
	if h.munmapFn != nil {
		return h.munmapFn(addr, size)
	}
	return unix.MunmapPtr(mem.Ptr(addr), size)
}

// Commit implements Provider.
func (h *HostProvider) Commit(r *Region, off, size uintptr) error {
	if err := r.CheckRange(off, size); err != nil {
		return err
	}
	addr := r.Base + off
	hr := r.Handle.(*hostRegion)
	protNone := !hr.hugeTLB && !h.opt.Populate // mapped PROT_NONE until committed
	if protNone {
		h.mprotect.Add(1)
		if err := unix.Mprotect(bytesAt(addr, size), unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return fmt.Errorf("%w: mprotect %d bytes: %w", ErrCommit, size, err)
		}
	}
	if !h.locked {
		return nil
	}
	h.mlock.Add(1)
	lock := unix.Mlock
	if h.mlockFn != nil {
		lock = h.mlockFn
	}
	if err := lock(bytesAt(addr, size)); err != nil {
		// mlock may fail partway: it marks the range locked (charging all of it to
		// RLIMIT_MEMLOCK) before it faults the pages in, and a page it cannot fault in ends it
		// with the pages before still locked. No Decommit follows a failed Commit, so unlock
		// the whole range here; munlock of pages that are not locked is harmless.
		h.munlock.Add(1)
		_ = unix.Munlock(bytesAt(addr, size))
		if protNone {
			h.mprotect.Add(1)
			_ = unix.Mprotect(bytesAt(addr, size), unix.PROT_NONE)
		}
		return h.memlockError(size, err)
	}
	h.lockedBytes.Add(int64(size))
	return nil
}

// Decommit implements Provider.
func (h *HostProvider) Decommit(r *Region, off, size uintptr) error {
	if err := r.CheckRange(off, size); err != nil {
		return err
	}
	addr := r.Base + off
	b := bytesAt(addr, size)
	if h.locked {
		h.munlock.Add(1)
		unlock := unix.Munlock
		if h.munlockFn != nil {
			unlock = h.munlockFn
		}
		if err := unlock(b); err != nil {
			return GiveBackRefused(fmt.Errorf("munlock of %d bytes: %w", size, err))
		}
		h.lockedBytes.Add(-int64(size))
	}
	h.madvise.Add(1)
	advise := unix.Madvise
	if h.madviseFn != nil {
		advise = h.madviseFn
	}
	if err := advise(b, unix.MADV_DONTNEED); err != nil {
		return h.decommitError("madvise(DONTNEED)", size, err)
	}
	if hr := r.Handle.(*hostRegion); !hr.hugeTLB {
		h.mprotect.Add(1)
		if err := unix.Mprotect(b, unix.PROT_NONE); err != nil {
			return h.decommitError("mprotect(PROT_NONE)", size, err)
		}
	}
	return nil
}

// decommitError reports a Decommit's op that failed after the munlock, if any: locked memory
// is unlocked then, no longer committed (ErrDecommitUnfinished), however the pages stay; the
// range of pageable memory stays committed (readable and writable).
func (h *HostProvider) decommitError(op string, size uintptr, err error) error {
	if h.locked {
		return GiveBackRefused(fmt.Errorf("%w: %s of %d bytes, unlocked already: %w",
			ErrDecommitUnfinished, op, size, err))
	}
	return GiveBackRefused(fmt.Errorf("%s of %d bytes: %w", op, size, err))
}

// Release implements Provider. It unmaps again, first, the regions of failed Reserves kept
// (ReleaseKept).
func (h *HostProvider) Release(r *Region) error {
	_ = h.ReleaseKept() // what is refused again stays kept, for Close to report
	return h.release(r)
}

// release unmaps r; a refused munmap leaves r as it was, for a later release.
func (h *HostProvider) release(r *Region) error {
	hr, ok := r.Handle.(*hostRegion)
	if !ok || !hr.released.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: region not from this provider or already released", ErrInvalid)
	}
	if err := h.unmap(hr.mapBase, hr.mapSize); err != nil {
		hr.released.Store(false) // still mapped: a later Release tries again
		return GiveBackRefused(fmt.Errorf("munmap of %d bytes: %w", hr.mapSize, err))
	}
	// munmap drops the locks of the range; keep the locked-bytes account honest.
	h.lockedBytes.Add(-h.lockedIn(r))
	return nil
}

// lockedIn is a conservative figure for the locked bytes of a region being released: the
// arena decommits before releasing, so only populated regions still hold locks.
func (h *HostProvider) lockedIn(r *Region) int64 {
	if h.locked && r.Committed {
		return int64(r.Size)
	}
	return 0
}

// Zero implements Zeroer.
func (h *HostProvider) Zero(addr, size uintptr) error {
	clear(bytesAt(addr, size))
	return nil
}

// memlockError explains a failed mlock: the limit in force, how much this provider holds
// locked, and how to raise it.
func (h *HostProvider) memlockError(size uintptr, err error) error {
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("%w: mlock %d bytes: %w", ErrCommit, size, err)
	}
	var lim unix.Rlimit
	limit, advice := "unknown", memlockAdvice(nil)
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit, advice = fmt.Sprintf("soft %s, hard %s", fmtLimit(lim.Cur), fmtLimit(lim.Max)), memlockAdvice(&lim)
	}
	return fmt.Errorf("%w: mlock of %d bytes failed (%w) with RLIMIT_MEMLOCK %s and %d bytes "+
		"already locked by this provider; %s; or use the pageable backend",
		ErrMemlock, size, err, limit, h.lockedBytes.Load(), advice)
}

// memlockAdvice says how the memlock limit lim (nil: unknown) can be raised. Below its hard
// limit, the soft one is the user's to raise with ulimit -l; at it, only root can (an ordinary
// user's ulimit -l then fails), or the service's or container's settings, or CAP_IPC_LOCK.
func memlockAdvice(lim *unix.Rlimit) string {
	const byRoot = "LimitMEMLOCK=infinity in the systemd unit, `--ulimit memlock=-1` for docker, " +
		"memlock in /etc/security/limits.conf, or give the process CAP_IPC_LOCK"
	switch {
	case lim == nil:
		return "raise the limit with `ulimit -l unlimited` (or a size in KiB), " + byRoot
	case lim.Cur < lim.Max:
		return fmt.Sprintf("raise the soft limit up to the hard one with `ulimit -l %s`, or the hard one: %s",
			strings.TrimSuffix(fmtLimit(lim.Max), " KiB"), byRoot)
	}
	return "the soft limit is the hard one, which only root raises (`ulimit -l` as an ordinary user " +
		"fails): " + byRoot
}

func fmtLimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v>>10)
}

// bytesAt views [addr, addr+size) as a byte slice for the system calls that take one.
func bytesAt(addr, size uintptr) []byte { return mem.Bytes(addr, size) }

// Report implements Reporter.
func (h *HostProvider) Report() ProviderStats {
	c := h.Counters()
	return ProviderStats{Syscalls: c.Total(), HugeTLBFallbacks: c.HugeTLBFallbacks}
}
