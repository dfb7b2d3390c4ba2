package pinned

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/numa"
)

// Backend selects where a pool's memory comes from.
type Backend uint8

const (
	// Locked is host memory from mmap, locked with mlock: resident and never swapped. It is the
	// default, and needs a sufficient RLIMIT_MEMLOCK or CAP_IPC_LOCK.
	Locked Backend = iota
	// Pageable is ordinary host memory from mmap: no memlock limit, but the kernel may swap it
	// and GPU copies from it are staged.
	Pageable
	// External is a region the caller owns, given in Options.External.
	External
	// CUDAHost is host memory pinned by the CUDA driver as it is committed, in 2 MiB granules:
	// VMM host memory (cuMemCreate at a host NUMA node, mapped into one reserved range per
	// region) where the driver supports it, else anonymous memory registered with
	// cuMemHostRegister so that every buffer lies inside one registration. Either way every
	// buffer, of any size, is copied to and from the GPU by DMA in one call at full bandwidth,
	// and no RLIMIT_MEMLOCK applies. It needs a CUDA driver and the device Options.Device; New
	// fails with an error wrapping ErrNoDriver without them. A commit the driver refuses is an
	// error (Alloc fails, naming the call, the size and the memory free); it never falls back to
	// pageable memory.
	CUDAHost
	// Auto picks CUDAHost when a CUDA driver and the device Options.Device are present, and
	// Locked otherwise, so one binary serves machines with and without a GPU. Stats.Backend
	// reports the choice ("cuda-host" or "locked").
	Auto
)

// String names the backend as Stats reports it.
func (b Backend) String() string {
	switch b {
	case Locked:
		return "locked"
	case Pageable:
		return "pageable"
	case External:
		return "external"
	case CUDAHost:
		return "cuda-host"
	case Auto:
		return "auto"
	}
	return fmt.Sprintf("backend(%d)", uint8(b))
}

// MarshalText writes the backend's name (String), as stats.json and the debug page show it.
func (b Backend) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a backend's name, as MarshalText writes it ("locked", "cuda-host"...).
// An unknown name is an error wrapping ErrInvalidOptions.
func (b *Backend) UnmarshalText(text []byte) error {
	for c := Locked; c <= Auto; c++ {
		if string(text) == c.String() {
			*b = c
			return nil
		}
	}
	return fmt.Errorf("%w: backend %q (want locked, pageable, external, cuda-host or auto)", ErrInvalidOptions, text)
}

// Options configures a Pool. The zero value is ready to use.
type Options struct {
	// Capacity caps the pool's memory in bytes. It is reserved as address space only; memory is
	// committed (and locked) as buffers need it. Default: the machine's physical memory. For
	// the External backend it is the region's size; a smaller Capacity uses only the region's
	// first Capacity bytes.
	Capacity int
	// Backend selects the memory (default Locked).
	Backend Backend
	// Align is the alignment of every buffer, a power of two from 16 to 32768 (default 64, a
	// cache line; 256 for GPU coalescing, 4096 for O_DIRECT).
	Align int
	// HugePages backs host memory with huge pages: arena.HugeTransparent or arena.HugeTLB (which
	// falls back to ordinary pages when the system has none; Stats counts the fallbacks).
	// CUDAHost's registered memory advises transparent huge pages by default; arena.HugeSmall
	// keeps 4 KiB pages there.
	HugePages arena.HugePages
	// Populate commits (and locks) each region of host memory in full when it is reserved.
	Populate bool
	// External is the caller's region for the External backend; it must be host memory, of
	// MinCapacity (one 2 MiB chunk) or more.
	External *arena.ExternalRegion
	// PurgeDelay is how long free memory stays committed (and locked) before it is given back,
	// in case it is needed again: at least this long, and at most 1.5 times as long after
	// the last free in its 2 MiB chunk (default 10 ms, mimalloc's; negative: only Trim gives
	// it back). The memory of free buffers among live ones goes two to three delays after
	// their page was last used, when the pool's purger finds it untouched twice.
	// Giving locked memory back is cheap, taking it again is not: mlock or cuMemHostRegister
	// faults in and zeroes every page (mmap+mlock of 256 MiB took 108 ms on an H100 host). A
	// program that frees big staging buffers and allocates them again at a slower cadence (a
	// batch every 100 ms, say) should raise the delay above that cadence, or make it negative
	// and call Trim itself.
	PurgeDelay time.Duration
	// Shards is the number of home shards (heaps) the pool spreads goroutines over, one per
	// processor (P) by default: GOMAXPROCS when New runs. Each P allocates from its home
	// shard, made the first time a goroutine allocates there. With a shard for every P, Alloc
	// and Free of class sizes take no lock (see the package documentation); with fewer, Ps
	// share shard P mod Shards under its lock and wait for each other when it is busy. A P
	// beyond the table (GOMAXPROCS raised later) shares the same way, or, in a pool with a
	// shard for every P at New, allocates from spill shards: heaps made as needed, up to
	// Shards of them. At most MaxShards. Each shard keeps its own partly used memory. Where
	// memory commits in 2 MiB units (CUDAHost), a pool of more than one shard sends buffers
	// above 64 KiB to one more shard shared by every P whenever it is free, and the other
	// shards make their class pages in its chunks when it is free too (see the package
	// documentation): the bench's serving trace (buffers of 4 KiB - 4 MiB) on two Ps peaked
	// at 1.12 - 1.17 times its live bytes with a shard per P, median 1.135 (1.17 - 1.22 before
	// the shared shard), 1.13 - 1.15 with one.
	Shards int
	// Device is the ordinal of the CUDA device for the CUDAHost and Auto backends (default 0).
	// The pool keeps the device's primary context retained until its memory is released.
	Device int
	// Devices lists the ordinals of other devices that copy to and from the pool's buffers
	// (CUDAHost and Auto). VMM host memory is granted to Device and to these only: a device not
	// listed is refused by copies. Registered memory is portable to every device. New refuses
	// an ordinal the driver does not have.
	Devices []int
	// NUMA selects the host NUMA node of the pool's memory. CUDAHost and Auto:
	// NUMANearest (the default) is the node nearest Device (cudamem.DeviceNode: driver, sysfs
	// or NVML), where VMM host memory is created and registered memory bound;
	// arena.NUMANode(n) is node n. Locked and Pageable: arena.NUMANode(n) binds the pool's
	// memory to node n with mbind; NUMANearest leaves placement to the kernel. A node the
	// machine (or, for VMM host memory, the driver) lacks is refused by New. For GPUs on
	// several nodes, see Nodes.
	NUMA arena.NUMA
	// Precommit is how many bytes to commit (and pin) ahead of need, in the background, when
	// the pool is made, at most Capacity: allocation does not wait for it (an Alloc commits
	// what it needs itself), and finds the memory ready once it is done. Its progress is in
	// Usage and Stats (Precommitted); PrecommitDone is closed, and OnPrecommit called, when it
	// ends, and WaitPrecommit returns the error that stopped it, if any (the memlock limit, the
	// driver refusing memory). Precommitted memory stays until a buffer uses it, Trim, or Close.
	// Memory that comes committed (Populate, a committed External region) leaves it nothing to
	// commit.
	Precommit int
	// OnPrecommit, when set, is called once the background commit of Precommit ends, on its
	// goroutine, with the bytes it committed and the error that stopped it (nil when it
	// committed what was asked, or the pool closed first).
	OnPrecommit func(committed uint64, err error)
	// CommitWorkers is how many goroutines commit memory at once: Precommit's batches, a
	// large buffer's commit, Trim's decommits. Zero means
	// arena.DefaultCommitWorkers (4); 1 commits on the calling goroutine only.
	CommitWorkers int
	// ZeroOnFree clears every buffer as it is freed, after Free has checked that it is a whole
	// live buffer, so that no later user of the memory (another tenant of a shared pool) reads
	// what it held. It clears the buffer's whole block (heap.Group.Extent), past its length: the
	// CPU reaches no further than the slice's length, but a device does, through DevicePointer
	// or a copy into the buffer, and nothing faults there, while the block's next owner may ask
	// for all of it. The block stays in proportion to the buffer: its size class (under a fifth
	// more, or Align), its object page (whole 32 KiB slices, an eighth more when one is reused),
	// or for a huge buffer its memory to the end of the commit granule it ends in (a host page,
	// or 2 MiB). It costs a memclr of that block per Free (see the package documentation).
	ZeroOnFree bool
	// Quota caps the bytes of the pool's live buffers (the sizes asked for); an Alloc beyond
	// it fails with ErrQuota and allocates nothing. A buffer freed while a CUDA stream may
	// still use it counts until the stream has passed its free; an Alloc the quota would
	// refuse first takes back the buffers the streams have passed; when it refuses even so,
	// its error says why buffers still wait where a reclaim could not tell (ErrDeviceFault
	// after a fault, cuda.ErrCapturing during a capture). Zero means no quota; negative is
	// refused.
	Quota int
	// RecordSites records, for every live buffer, when it was allocated and where (the caller
	// of Alloc and seven frames above it, with runtime.Callers): Blocks reports them, and Close
	// names the sites holding the most bytes when buffers are still live. It costs a
	// runtime.Callers and a map insert per Alloc and a map delete per Free
	// (BenchmarkPoolPairSites measures it); off, it costs nothing.
	RecordSites bool
	// Logger, when set, receives the pool's rare events at Info level and above, with sizes:
	// regions reserved, purges, forced purges, and commits the system or driver refused (the
	// memlock limit, for locked memory). Nil (the default) logs nothing.
	Logger *slog.Logger
	// Trace, when set, receives a record of every Alloc and Free (size, alignment, time and,
	// with TraceGoroutines, goroutine) in the compact form `cd bench && go run . -replay FILE` plays
	// against other allocators. Records are buffered; FlushTrace and Close write them out, and
	// so does the release of a closed pool's memory (by the last buffer's Free, say). It
	// costs a lock and a map update per Alloc and per Free, and serialises Frees (see the
	// notes for figures).
	Trace io.Writer
	// Source, when set, is where the pool's regions come from, in place of the memory Backend
	// names: an arena.Provider of host memory (package ipcpool's grants of a pool shared by
	// processes). Backend then names what kind of memory the source gives: Locked (the
	// default) or CUDAHost (memory the driver copies by DMA; the source's Kind is
	// arena.HostPinned and it names its device with a Device() *cuda.Device method, which
	// orders frees by stream as a CUDAHost pool does). Capacity defaults to the source's.
	Source arena.Provider
	// Sharer, when set, takes part in the frees the pool cannot finish alone: of memory
	// outside the pool, and of buffers shared with Pool.Share. A pool with a
	// Sharer costs the same on its fast paths.
	Sharer Sharer
	// TraceGoroutines adds the allocating goroutine's number to each trace record. Go has no
	// cheap way to learn it: it costs a stack print, about 14 µs per Alloc on the build
	// machine. Without it the records say goroutine 0 (unknown).
	TraceGoroutines bool
}

func (o *Options) provider() (arena.Provider, *arena.HostProvider, error) {
	if o.Align == 0 {
		o.Align = 64
	}
	if o.Align < 16 || o.Align > 32<<10 || o.Align&(o.Align-1) != 0 {
		return nil, nil, fmt.Errorf("%w: %d (want a power of two from 16 to 32768)", ErrInvalidAlign, o.Align)
	}
	if o.Precommit < 0 {
		return nil, nil, fmt.Errorf("%w: precommit %d bytes", ErrInvalidOptions, o.Precommit)
	}
	if o.HugePages > arena.HugeSmall {
		return nil, nil, fmt.Errorf("%w: huge pages %d (want arena.HugeNone, HugeTransparent, HugeTLB or HugeSmall)", ErrInvalidOptions, o.HugePages)
	}
	if n, ok := o.NUMA.Node(); ok && o.Backend != CUDAHost && !slices.Contains(numa.Online("/sys"), n) {
		// mbind would refuse it at the first Alloc; the CUDA providers check their own.
		return nil, nil, fmt.Errorf("%w: NUMA node %d: the machine has nodes %v", ErrInvalidOptions, n, numa.Online("/sys"))
	}
	if o.CommitWorkers < 0 || o.CommitWorkers > arena.MaxCommitWorkers {
		return nil, nil, fmt.Errorf("%w: %d commit workers (want 0 to %d)", ErrInvalidOptions, o.CommitWorkers, arena.MaxCommitWorkers)
	}
	if o.Source != nil {
		return o.source()
	}
	ho := arena.HostOptions{HugePages: o.HugePages, Populate: o.Populate}
	if o.Backend == Locked || o.Backend == Pageable {
		ho.Node = o.NUMA
	}
	switch o.Backend {
	case Locked:
		h := arena.LockedHost(ho)
		return h, h, nil
	case Pageable:
		h := arena.PageableHost(ho)
		return h, h, nil
	case External:
		if o.External == nil {
			return nil, nil, fmt.Errorf("%w: the External backend needs Options.External", ErrInvalidOptions)
		}
		if !o.External.Kind.HostAccessible() {
			return nil, nil, fmt.Errorf("%w: a pinned pool needs host memory, not %s", ErrInvalidOptions, o.External.Kind)
		}
		e, err := arena.External(*o.External)
		return e, nil, err
	case CUDAHost:
		c, err := o.cudaHost(ho)
		return c, nil, err
	case Auto:
		c, err := o.cudaHost(ho)
		if err == nil {
			o.Backend = CUDAHost
			return c, nil, nil
		}
		if errors.Is(err, ErrInvalidOptions) {
			return nil, nil, err // a device listed that the driver lacks: no quiet fallback
		}
		o.Backend = Locked
		ho.Node = o.NUMA // no device is nearest: a node asked for binds, the default does not
		h := arena.LockedHost(ho)
		return h, h, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown backend %d", ErrInvalidOptions, o.Backend)
}

// cudaHost opens the CUDA device and makes a provider of pinned host memory on it, which owns
// the device.
func (o *Options) cudaHost(ho arena.HostOptions) (arena.Provider, error) {
	if n, err := cuda.Count(); err == nil {
		for _, d := range o.Devices {
			if d < 0 || d >= n {
				return nil, fmt.Errorf("%w: Devices lists device %d; the driver has %d", ErrInvalidOptions, d, n)
			}
		}
	}
	c, err := cudamem.OpenHost(o.Device, cudamem.HostOptions{HostOptions: ho, Devices: o.Devices, NUMA: o.NUMA})
	if err != nil {
		return nil, fmt.Errorf("the %s backend: %w", CUDAHost, err)
	}
	return c, nil
}

// deviceMapper is what Pool.DevicePointer asks of a CUDAHost pool's provider (cudamem's pinned
// host providers answer it): the address at which a device sees host address addr.
type deviceMapper interface {
	DevicePointer(addr uintptr) (cuda.DevicePtr, error)
}

// closeDevice gives back the CUDA device a CUDAHost pool opened, once its arena is closed.
func closeDevice(prov arena.Provider) error {
	if c, ok := prov.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (o *Options) capacity(prov arena.Provider) (uintptr, error) {
	switch {
	case o.Capacity < 0:
		return 0, fmt.Errorf("%w: capacity %d", ErrInvalidOptions, o.Capacity)
	case o.Capacity > 0:
		return uintptr(o.Capacity), nil
	}
	if c, ok := prov.(arena.FixedCapacity); ok {
		return c.Capacity(), nil
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 64 << 30, nil
	}
	return uintptr(si.Totalram) * uintptr(si.Unit), nil
}

// source checks Options.Source against Backend.
func (o *Options) source() (arena.Provider, *arena.HostProvider, error) {
	k := o.Source.Kind()
	switch {
	case !k.HostAccessible():
		return nil, nil, fmt.Errorf("%w: a pinned pool needs host memory, not %s", ErrInvalidOptions, k)
	case o.Backend == Locked && k != arena.HostPinned, o.Backend == CUDAHost && k == arena.HostPinned:
		return o.Source, nil, nil
	}
	return nil, nil, fmt.Errorf("%w: a source of %s memory for the %s backend", ErrInvalidOptions, k, o.Backend)
}
