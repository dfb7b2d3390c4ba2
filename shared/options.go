package shared

// The options of a shared pool and the geometry they give (layout).

import (
	"fmt"
	"os"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Limits and defaults of Options.
const (
	maxRegions = 64
	maxSlots   = 256
	// DefaultSlots is how many processes (the owner included) may be attached at once when
	// Options.Slots is zero.
	DefaultSlots = 16
	// DefaultRingSize is the entries of each remote-free ring when Options.RingSize is zero.
	DefaultRingSize = 4096
	grantUnit       = 2 << 20
)

// Options configures a shared pool (Serve).
type Options struct {
	// Size is the pool's memory in bytes, locked by the owner at Serve. Required; rounded up
	// to the grant size.
	Size uintptr
	// GrantSize is the unit in which processes take memory of the pool for their heaps: a
	// multiple of 2 MiB. Default: Size/64 rounded up to a power of two, at least 2 MiB. A
	// process holds at most 64 grants, so a smaller grant suits many small processes, a
	// larger one few big ones.
	GrantSize uintptr
	// RegionSize is the size of each memfd the pool is made of, a multiple of GrantSize and
	// at most MaxRegistration. Default min(Size, MaxRegistration).
	RegionSize uintptr
	// Slots is how many processes, the owner included, may be attached at once (default
	// DefaultSlots, at most 256).
	Slots int
	// RingSize is the capacity, in frees, of each ring carrying one process's frees of
	// another's buffers (default DefaultRingSize). A free waits while its ring is full.
	RingSize int
	// Align is every buffer's alignment in the owner's heap (heap.Options.Align), 16 B to
	// 32 KiB, 64 by default.
	Align uintptr
	// Mode is the socket file's permission bits (default 0600: the owner's user only).
	Mode os.FileMode
	// AllowUIDs are user ids allowed to attach besides the owner's own; root (0) is allowed
	// only when listed or when the owner is root. A peer's id comes from SO_PEERCRED.
	AllowUIDs []int
	// DrainInterval is how often the owner takes in the frees others made of its buffers
	// (default DefaultDrainInterval).
	DrainInterval time.Duration
	// Backend is the kind of memory the pool is made of: Locked (memfds, the default) or VMM
	// (exportable CUDA host granules; needs Device, here and in every attached process).
	Backend Backend
	// Device, when set, registers every region with the owner's CUDA context
	// (cuMemHostRegister, portable and device-mapped), one registration per region, so that
	// copies to and from the pool run by DMA. Each attached process registers the regions with
	// its own context (AttachOptions.Device).
	Device *cuda.Device
	// MaxRegistration caps a region, and so one registration (default
	// DefaultMaxRegistration, 64 GiB); a bigger pool is made of several regions. A buffer
	// never crosses a region, so no copy spans two registrations.
	MaxRegistration uintptr
	// FallbackPageable, when set, keeps a region the owner cannot lock (the memlock limit) or
	// register (the driver refused) mapped as it is, pageable or unregistered, rather than
	// failing; Stats.PageableRegions says which and why. Copies from pageable memory run at
	// a fraction of the bandwidth.
	FallbackPageable bool
}

// layout checks the options and returns the pool's geometry.
func (o Options) layout() (layout, error) {
	if o.Size == 0 || o.Size > 1<<44 {
		return layout{}, fmt.Errorf("%w: size %d (want 1 byte to 16 TiB)", ErrInvalidOptions, o.Size)
	}
	g := o.GrantSize
	if g == 0 {
		g = grantUnit
		for g < o.Size/64 {
			g <<= 1
		}
	}
	if g%grantUnit != 0 {
		return layout{}, fmt.Errorf("%w: grant size %d is not a multiple of 2 MiB", ErrInvalidOptions, g)
	}
	size := (o.Size + g - 1) / g * g
	maxReg := o.MaxRegistration
	if maxReg == 0 {
		maxReg = DefaultMaxRegistration
	}
	rs := o.RegionSize
	if rs == 0 {
		rs = min(size, maxReg/g*g)
	}
	if rs > maxReg {
		return layout{}, fmt.Errorf("%w: region size %d above the registration cap %d", ErrInvalidOptions, rs, maxReg)
	}
	if rs == 0 || rs%g != 0 {
		return layout{}, fmt.Errorf("%w: region size %d is not a multiple of the grant size %d", ErrInvalidOptions, rs, g)
	}
	size = (size + rs - 1) / rs * rs
	l := layout{regions: int(size / rs), regionSize: rs, grantSize: g, slots: o.Slots, ringCap: o.RingSize}
	if l.slots == 0 {
		l.slots = DefaultSlots
	}
	if l.ringCap == 0 {
		l.ringCap = DefaultRingSize
	}
	if l.regions > maxRegions || l.slots < 1 || l.slots > maxSlots || l.ringCap < 1 || l.ringCap > 1<<20 {
		return layout{}, fmt.Errorf("%w: %d regions (at most %d), %d slots (1 to %d), ring of %d (1 to 1Mi)",
			ErrInvalidOptions, l.regions, maxRegions, l.slots, maxSlots, l.ringCap)
	}
	return l, nil
}
