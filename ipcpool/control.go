package ipcpool

import (
	"fmt"
	"sync/atomic"
)

// The control region: one memfd every process maps read-write (bookkeeping, not buffer
// memory: it is not locked). It holds 64-bit words that every process reads and writes with
// atomic operations only, in sections that each start on a cache line:
//
//	header   hdrWords: magic, version, pool id, the geometry (regions, region size, grant
//	         size, slots, ring capacity, exports per slot, backend), the fence epoch, the
//	         owner's pid and its epoch (how many owners the pool has had)
//	grants   one word per grant: gen<<24 | state<<16 | slot+1, the holder's, or in limbo or
//	         orphaned the slot kept for the process gone alive it waits for (0: none).
//	         Written by the owner only, from its own table in Go memory: a word a peer
//	         overwrites misleads what reads it for show (Stats), and an owner that adopts the
//	         pool only until each process claims its grants by its own record (claim.go).
//	slots    one line per slot: the fence epoch the process passed, its serial (how many
//	         processes the slot has had: 0 while free, serialGone added while the slot is
//	         kept for a process gone alive: leave.go), pid and start time, flags (a CUDA
//	         device: it must pass fences), the owner's ask for empty grants and the answer,
//	         and the overflow count of retired handles no ring had room for.
//	exports  exportsPerSlot entries per slot, one line each: the handles of the
//	         buffers the process in the slot shared.
//	rings    slots×slots single-producer single-consumer rings, ring (p, c) carrying to
//	         process c the handles of its buffers that process p retired: head (written by
//	         c), tail (written by p), each on a line of its own, then capacity entries.
//
// Every word read from here is a peer's input: it is checked before it indexes, sizes or
// frees anything (a ring index is taken modulo the capacity, a count bounded by it, an entry
// checked against what its holder recorded in Go memory), so a peer that writes garbage here
// makes no other process crash, write outside the pool, or touch a buffer it does not hold; and
// no loop on a word retries for as long as a peer rewrites it (casTries).
const (
	ctlMagic   = 0x706d2d6970633033 // "pm-ipc03"
	ctlVersion = 3
	hdrWords   = 16
	lineWords  = 8 // a 64-byte cache line
	ringHdr    = 2 * lineWords
)

// Header word indexes.
const (
	hMagic = iota
	hVersion
	hPool
	hRegions
	hRegionSize
	hGrantSize
	hSlots
	hRingCap
	hExports
	hBackend
	hFence      // the fence epoch: bumped by the owner when grants wait for a fence
	hOwnerPid   // the owner's pid
	hOwnerEpoch // bumped by each owner that adopts the pool
)

// Slot line word indexes.
const (
	sFence    = iota // the last fence epoch the process passed (written by it)
	sSerial          // the slot's serial: 0 while free (written by the owner)
	sPid             // the process's pid (owner)
	sStart           // its start time in clock ticks since boot (/proc/pid/stat), against pid reuse (owner)
	sFlags           // flagDevice: the process has a CUDA context that may queue copies (written by it)
	sAsk             // bumped by the owner to ask for empty grants back
	sAnswer          // the last ask the process answered (written by it)
	sOverflow        // bumped by a producer that found the slot's ring full (see exports.go)
)

// Slot flags (sFlags), written by the process in the slot: flagDevice, it has a CUDA context
// that may queue copies (it must pass fences); flagRetains, it may hold retain bits (the owner
// scans the export table for them when it goes).
const (
	flagDevice  = 1
	flagRetains = 2
)

// serialGone marks the serial of a slot kept for a process gone from its socket alive
// (leave.go): an owner that adopts the pool keeps the slot, and what the process holds, until
// it has exited. Serials stay below maxPoolSize (takeSlot), far below it.
const serialGone = 1 << 62

// layout is the geometry of a pool, the same in every process.
type layout struct {
	regions    int
	regionSize uintptr
	grantSize  uintptr
	slots      int
	ringCap    int
	exports    int // entries per slot
}

// Limits of a layout: what a hello may claim (wire.go checks it against these).
const (
	maxRegions  = 64
	maxSlots    = 256
	maxRingCap  = 1 << 20
	maxExports  = 1 << 22
	maxPoolSize = 1 << 44
	grantUnit   = 2 << 20
)

// check reports why l is not a geometry this package can serve, or nil.
func (l layout) check() error {
	switch {
	case l.regions < 1 || l.regions > maxRegions:
		return fmt.Errorf("%d regions (1 to %d)", l.regions, maxRegions)
	case l.grantSize < grantUnit || l.grantSize%grantUnit != 0 || l.grantSize > maxPoolSize:
		return fmt.Errorf("grant size %d (a multiple of 2 MiB)", l.grantSize)
	case l.regionSize < l.grantSize || l.regionSize%l.grantSize != 0 || l.regionSize > maxPoolSize:
		return fmt.Errorf("region size %d (a multiple of the grant size %d)", l.regionSize, l.grantSize)
	case uint64(l.regionSize)*uint64(l.regions) > maxPoolSize:
		return fmt.Errorf("a pool of %d regions of %d bytes (16 TiB at most)", l.regions, l.regionSize)
	case l.slots < 1 || l.slots > maxSlots:
		return fmt.Errorf("%d slots (1 to %d)", l.slots, maxSlots)
	case l.ringCap < 1 || l.ringCap > maxRingCap:
		return fmt.Errorf("rings of %d (1 to %d)", l.ringCap, maxRingCap)
	case l.exports < 1 || l.exports > maxExports:
		return fmt.Errorf("%d exports per slot (1 to %d)", l.exports, maxExports)
	}
	return nil
}

func (l layout) grants() int             { return l.regions * l.grantsPerRegion() }
func (l layout) grantsPerRegion() int    { return int(l.regionSize / l.grantSize) }
func (l layout) poolBytes() uintptr      { return uintptr(l.regions) * l.regionSize }
func (l layout) grantOf(off uintptr) int { return int(off / l.grantSize) }
func up(w int) int                       { return (w + lineWords - 1) / lineWords * lineWords }
func (l layout) grantsStart() int        { return hdrWords }
func (l layout) slotsStart() int         { return up(hdrWords + l.grants()) }
func (l layout) exportsStart() int       { return l.slotsStart() + l.slots*lineWords }
func (l layout) ringsStart() int         { return l.exportsStart() + l.slots*l.exports*lineWords }
func (l layout) ringWords() int          { return ringHdr + up(l.ringCap) }
func (l layout) words() int              { return l.ringsStart() + l.slots*l.slots*l.ringWords() }

// ctlBytes is the size of the control region: its words, rounded up to whole pages.
func (l layout) ctlBytes() uintptr {
	return (uintptr(8*l.words()) + pageSize - 1) &^ (pageSize - 1)
}

// sameRegion reports whether [off, off+n) (n > 0) lies inside the pool and inside one region.
func (l layout) sameRegion(off, n uint64) bool {
	return n > 0 && off < uint64(l.poolBytes()) && n <= uint64(l.poolBytes())-off &&
		off/uint64(l.regionSize) == (off+n-1)/uint64(l.regionSize)
}

// validRun reports whether grants [first, first+n) (a peer's words) are a run of the pool: at
// least one grant, all inside one region.
func (l layout) validRun(first, n uint64) bool {
	per := uint64(l.grantsPerRegion())
	return n >= 1 && n <= per && first < uint64(l.grants()) && first%per+n <= per
}

// Grant words: gen<<24 | state<<16 | slot+1 (held: its holder; in limbo or orphaned: the slot
// kept for its process, or none).
const (
	gFree   = 0 // free (slot 0)
	gFenced = 1 // free once every process with a device has passed the fence
	gLimbo  = 2 // of a process gone from its socket, until it has exited
	gOrphan = 3 // of a process gone, kept for the buffers others retain in it
)

func packGrant(gen uint64, state, slot int) uint64 {
	return gen<<24 | uint64(state)<<16 | uint64(slot+1)&0xffff
}

func unpackGrant(w uint64) (gen uint64, state, slot int) {
	return w >> 24, int(w >> 16 & 0xff), int(w&0xffff) - 1
}

// ctl is a process's view of the control region, with the sections' word offsets worked out
// once (they are on every handle's path).
type ctl struct {
	layout
	w                           []uint64
	grants0, slots0, exports0   int
	rings0, ringW, nslots, nexp int
	// peer, set by tests only (before any call uses the ctl), runs in cas between the caller's
	// load of word i and its compare-and-swap, and in loadAgain before the load: a peer
	// process that writes the word meanwhile.
	peer func(i int)
}

// casTries bounds every compare-and-swap loop on a word that another process can write: a
// loop that loses it casTries times in a row (a peer rewriting the word without end) gives up,
// with ErrProtocol (contended) or leaving the word to a later round, never spinning, nor
// holding a lock, for as long as the peer likes.
const casTries = 64

// newCtl views words w as the control region of geometry l (which must pass check, and w
// hold l.words()).
func newCtl(l layout, w []uint64) ctl {
	return ctl{layout: l, w: w, grants0: l.grantsStart(), slots0: l.slotsStart(), exports0: l.exportsStart(),
		rings0: l.ringsStart(), ringW: l.ringWords(), nslots: l.slots, nexp: l.exports}
}

func (c *ctl) grantWord(g int) int   { return c.grants0 + g }
func (c *ctl) slotWord(s, i int) int { return c.slots0 + s*lineWords + i }
func (c *ctl) entry(e int) int       { return c.exports0 + e*lineWords }
func (c *ctl) ring(p, q int) int     { return c.rings0 + (p*c.nslots+q)*c.ringW }

func (c *ctl) load(i int) uint64     { return atomic.LoadUint64(&c.w[i]) }
func (c *ctl) store(i int, v uint64) { atomic.StoreUint64(&c.w[i], v) }

// loadAgain is load of word i in a loop that looks at it again (freeEntry's look and take):
// the test hook peer runs first, a peer rewriting the word between the loop's loads.
func (c *ctl) loadAgain(i int) uint64 {
	if c.peer != nil {
		c.peer(i)
	}
	return c.load(i)
}
func (c *ctl) cas(i int, old, v uint64) bool {
	if c.peer != nil {
		c.peer(i)
	}
	return atomic.CompareAndSwapUint64(&c.w[i], old, v)
}
func (c *ctl) add(i int, v uint64) uint64 { return atomic.AddUint64(&c.w[i], v) }

func (c *ctl) slotLoad(s, i int) uint64     { return c.load(c.slotWord(s, i)) }
func (c *ctl) slotStore(s, i int, v uint64) { c.store(c.slotWord(s, i), v) }

// writeHeader writes the header of a new pool.
func (c *ctl) writeHeader(pool uint64, backend uint64) {
	for i, v := range []uint64{ctlMagic, ctlVersion, pool, uint64(c.regions), uint64(c.regionSize), uint64(c.grantSize),
		uint64(c.slots), uint64(c.ringCap), uint64(c.exports), backend} {
		c.store(i, v)
	}
}

// matches reports whether the header is that of pool with geometry l.
func (c *ctl) matches(pool uint64, l layout, backend uint64) bool {
	want := []uint64{ctlMagic, ctlVersion, pool, uint64(l.regions), uint64(l.regionSize), uint64(l.grantSize),
		uint64(l.slots), uint64(l.ringCap), uint64(l.exports), backend}
	for i, v := range want {
		if c.load(i) != v {
			return false
		}
	}
	return true
}
