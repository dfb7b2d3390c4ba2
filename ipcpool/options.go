package ipcpool

import (
	"fmt"
	"os"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// Defaults of Options and AttachOptions.
const (
	// DefaultSlots is how many processes (the owner included) may be attached at once when
	// Options.Slots is zero.
	DefaultSlots = 16
	// DefaultRingSize is the entries of each ring of handles let go when Options.RingSize is
	// zero.
	DefaultRingSize = 1024
	// DefaultExports is how many buffers one process may have shared (with a Handle) at once
	// when Options.Exports is zero.
	DefaultExports = 8192
	// DefaultMaxRegistration caps one region, and so one CUDA registration, when
	// Options.MaxRegistration is zero: drivers from r580 on refuse a registration of 512 GiB
	// or more, and 64 GiB pieces are what the projects that met it settled on.
	DefaultMaxRegistration = 64 << 30
	// DefaultDrainInterval is how often a process takes in the handles of its buffers that
	// others let go, passes fences and answers the owner, when nothing asks sooner.
	DefaultDrainInterval = time.Millisecond
	// DefaultTimeout bounds a handshake, a grant request and a detach when the options leave
	// it zero.
	DefaultTimeout = 5 * time.Second
)

// Options configures a pool (Serve).
type Options struct {
	// Size is the pool's memory in bytes, locked by the owner at Serve. Required; rounded up
	// to the grant size.
	Size int
	// GrantSize is the unit in which processes take memory of the pool and give it back: a
	// multiple of 2 MiB. Default: Size/64 rounded up to a power of two, at least 2 MiB. A
	// process holds at most 64 runs of grants (an arena's regions), so a smaller grant suits
	// many small processes, a larger one few big ones.
	GrantSize int
	// RegionSize is the size of each memfd the pool is made of, a multiple of GrantSize and at
	// most MaxRegistration. Default min(Size, MaxRegistration). A buffer never crosses a
	// region.
	RegionSize int
	// MaxRegistration caps a region, and so one CUDA registration (default
	// DefaultMaxRegistration).
	MaxRegistration int
	// Slots is how many processes, the owner included, may be attached at once (default
	// DefaultSlots, at most 256).
	Slots int
	// RingSize is the capacity of each ring carrying to a process the handles of its buffers
	// others let go (default DefaultRingSize). A full ring never blocks a free: the process
	// then scans its handles.
	RingSize int
	// Exports is how many buffers each process may have shared at once (default
	// DefaultExports): a Handle beyond it fails with ErrPoolFull.
	Exports int
	// Pool configures the owner's own pinned.Pool: Align, Shards, PurgeDelay (which also
	// bounds how long an empty grant stays with a process before it goes back), ZeroOnFree,
	// Quota, RecordSites, Logger, Trace. Backend is Locked (the default) or CUDAHost, which
	// registers every region with the CUDA context of device Pool.Device so that copies run by
	// DMA (Auto: CUDAHost where a driver is). The fields that say where memory comes from
	// (Capacity, External, HugePages, Populate, NUMA, Precommit, Source, Sharer) are the
	// pool's own and must be left zero.
	Pool pinned.Options
	// VMM makes the pool of exportable CUDA host granules (cuMemCreate at the host NUMA node
	// nearest Pool.Device) instead of memfds: the driver pins them, and every process that
	// attaches needs a CUDA device (AttachOptions.Pool.Backend CUDAHost). It needs Backend
	// CUDAHost.
	VMM bool
	// FallbackPageable keeps a region the owner cannot lock (the memlock limit) or register
	// (the driver refused) mapped as it is, pageable or unregistered, rather than failing;
	// SharedStats.PageableRegions says which and why.
	FallbackPageable bool
	// Mode is the socket file's permission bits (default 0600: the owner's user only).
	Mode os.FileMode
	// AllowUIDs are user ids allowed to attach besides the owner's own; root is allowed only
	// when listed or when the owner is root. A peer's id comes from SO_PEERCRED.
	AllowUIDs []int
	// DrainInterval is how often the owner takes in the handles others let go, checks fences
	// and looks after processes gone (default DefaultDrainInterval).
	DrainInterval time.Duration
	// Timeout bounds a process's handshake as a whole, from its connection to its ready (one
	// deadline, not one per step): a connection that has not finished it by then is closed,
	// and its slot is free at once (default DefaultTimeout). A process that attaches while the
	// owner waits for a pool to adopt (Adopt) waits for it Timeout at most, and then has the
	// whole Timeout for the rest. After an adoption it is also how long the previous owner's
	// processes have to rejoin (a rejoin connected by then has its own handshake's Timeout).
	Timeout time.Duration
	// Adopt, when positive, makes Serve wait that long for the memory of a previous owner of
	// the pool at path (one that died), handed over by a process of it that survived or by a
	// keeper (Keep): the pool is then adopted as it is, still locked, its processes, grants
	// and handles as they were, and the other options' geometry (Size, GrantSize, Slots...)
	// is the adopted pool's. When nothing is handed over in time, Serve makes a new pool.
	Adopt time.Duration
}

// layout checks the options and returns the pool's geometry.
func (o Options) layout() (layout, error) {
	if o.Size <= 0 || o.Size > maxPoolSize || o.GrantSize < 0 || o.RegionSize < 0 || o.MaxRegistration < 0 ||
		o.Slots < 0 || o.RingSize < 0 || o.Exports < 0 {
		return layout{}, fmt.Errorf("%w: size %d (1 byte to 16 TiB), and no negative size or count", ErrInvalidOptions, o.Size)
	}
	size := uintptr(o.Size)
	g := uintptr(o.GrantSize)
	if g == 0 {
		g = grantUnit
		for g < size/64 {
			g <<= 1
		}
	}
	if g%grantUnit != 0 {
		return layout{}, fmt.Errorf("%w: grant size %d is not a multiple of 2 MiB", ErrInvalidOptions, g)
	}
	size = (size + g - 1) / g * g
	maxReg := uintptr(o.MaxRegistration)
	if maxReg == 0 {
		maxReg = DefaultMaxRegistration
	}
	rs := uintptr(o.RegionSize)
	if rs == 0 {
		rs = min(size, maxReg/g*g)
	}
	if rs > maxReg || rs == 0 || rs%g != 0 {
		return layout{}, fmt.Errorf("%w: region size %d (a multiple of the grant size %d, at most the registration cap %d)",
			ErrInvalidOptions, rs, g, maxReg)
	}
	size = (size + rs - 1) / rs * rs
	l := layout{regions: int(size / rs), regionSize: rs, grantSize: g, slots: o.Slots, ringCap: o.RingSize, exports: o.Exports}
	if l.slots == 0 {
		l.slots = DefaultSlots
	}
	if l.ringCap == 0 {
		l.ringCap = DefaultRingSize
	}
	if l.exports == 0 {
		l.exports = DefaultExports
	}
	if err := l.check(); err != nil {
		return layout{}, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	return l, nil
}

// AttachOptions configures an attached process.
type AttachOptions struct {
	// Pool configures the process's own pinned.Pool over the shared memory, as
	// Options.Pool does the owner's.
	Pool pinned.Options
	// FallbackPageable is Options.FallbackPageable for this process: a region it cannot lock
	// or register stays mapped as it is, and SharedStats.PageableRegions says so.
	FallbackPageable bool
	// DrainInterval is how often the process takes in the handles of its buffers others let
	// go, passes fences and answers the owner (default DefaultDrainInterval).
	DrainInterval time.Duration
	// Timeout bounds the handshake of Attach as a whole, a grant request (an Alloc that needs
	// more of the pool waits at most so long for the owner, and then fails with an error
	// matching context.DeadlineExceeded) and a detach (default DefaultTimeout).
	Timeout time.Duration
	// ServerUIDs are the user ids Attach accepts as the pool's server, read from the socket
	// with SO_PEERCRED (the kernel's record, which the server cannot forge). Default: the
	// process's own user and root. A server of another user is refused with ErrRefused before
	// anything is mapped.
	ServerUIDs []int
}

// poolOptions checks what a caller set in the pinned.Options of a process's pool and fills
// in the rest.
func poolOptions(o pinned.Options) (pinned.Options, error) {
	if o.Capacity != 0 || o.External != nil || o.HugePages != 0 || o.Populate || o.NUMA != 0 ||
		o.Precommit != 0 || o.Source != nil || o.Sharer != nil || o.Devices != nil {
		return o, fmt.Errorf("%w: Pool sets where memory comes from (Capacity, External, HugePages, Populate, NUMA, Precommit, Devices, Source or Sharer): the shared pool does",
			ErrInvalidOptions)
	}
	switch o.Backend {
	case pinned.Locked, pinned.CUDAHost, pinned.Auto:
	default:
		return o, fmt.Errorf("%w: backend %s (want Locked, CUDAHost or Auto)", ErrInvalidOptions, o.Backend)
	}
	if o.Align == 0 {
		o.Align = 64
	}
	if o.Align < 16 || o.Align > 32<<10 || o.Align&(o.Align-1) != 0 {
		return o, fmt.Errorf("%w: alignment %d (want a power of two from 16 to 32768)", ErrInvalidOptions, o.Align)
	}
	return o, nil
}

// keeperPool is the pinned.Options of a keeper's pool.
func keeperPool() pinned.Options { return pinned.Options{Shards: 1} }
