package shared

import (
	"sync/atomic"
)

// The control region: one memfd every process maps read-write (not locked: it is bookkeeping,
// not buffer memory). It holds, as 64-bit words that every process reads and writes with
// atomic operations only:
//
//	header   hdrWords words: magic, version, pool id, regions, region size, grant size,
//	         slots, ring capacity, fence epoch
//	grants   one word per grant: gen<<16 | owner slot+1 (0: free), with grantFenced set on a
//	         grant taken back from a process that left buffers behind, until every process
//	         has passed the fence (see Owner.reclaim). Only the owner's server writes it; every
//	         process reads it.
//	fences   one word per slot: the last fence epoch the process in that slot passed (its
//	         CUDA context synchronized after the epoch was published). Written by that process.
//	rings    slots×slots single-producer single-consumer rings, ring (p, c) carrying the
//	         frees process p makes of blocks process c owns: head (written by c), tail
//	         (written by p), each on a cache line of its own, then capacity entries.
//
// A ring is consistent at every store (an entry is written before the tail that publishes
// it, and read before the head that frees it), so a process killed at any instant leaves
// rings that the next process in its slot, or its peers, go on using as they are: nothing is
// reset when a slot is reused. An entry names the block and the generation of its grant; the
// consumer drops an entry whose grant is no longer its own at that generation (a free that
// raced the grant being taken back), so a stale entry never frees a block of a later owner.
const (
	ctlMagic   = 0x706d2d73686d3031 // "pm-shm01"
	ctlVersion = 2
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
	hFence // the fence epoch: bumped by the owner when grants are fenced
)

// layout is the geometry of a control region, the same in every process.
type layout struct {
	regions    int
	regionSize uintptr
	grantSize  uintptr
	slots      int
	ringCap    int
}

func (l layout) grants() int          { return l.regions * int(l.regionSize/l.grantSize) }
func (l layout) grantsPerRegion() int { return int(l.regionSize / l.grantSize) }
func (l layout) grantWord(g int) int  { return hdrWords + g }
func (l layout) fenceWord(s int) int  { return hdrWords + l.grants() + s }
func (l layout) ringsStart() int {
	return (hdrWords + l.grants() + l.slots + lineWords - 1) / lineWords * lineWords
}
func (l layout) ringWords() int                 { return ringHdr + l.ringCap }
func (l layout) ring(p, c int) int              { return l.ringsStart() + (p*l.slots+c)*l.ringWords() }
func (l layout) words() int                     { return l.ring(l.slots, 0) }
func (l layout) poolBytes() uintptr             { return uintptr(l.regions) * l.regionSize }
func (l layout) grantAt(r int, off uintptr) int { return r*l.grantsPerRegion() + int(off/l.grantSize) }

// packGrant packs a grant's generation and owner slot (-1: free).
func packGrant(gen uint64, slot int) uint64 { return gen<<16 | uint64(slot+1) }

// grantFenced marks a free grant that may not be handed out yet: it is free to every reader
// (unpackGrant), only the owner's grant looks at the mark.
const grantFenced = 1 << 15

// unpackGrant is packGrant's inverse.
func unpackGrant(w uint64) (gen uint64, slot int) { return w >> 16, unpackSlot(w) }

// unpackSlot is the owner slot of a grant word (-1: free, fenced or not).
func unpackSlot(w uint64) int { return int(w&(grantFenced-1)) - 1 }

// Ring entries: the block's offset in the pool in 16-byte units (40 bits: 16 TiB) and the low
// 24 bits of its grant's generation.
const (
	entryOffBits = 40
	entryGenMask = 1<<24 - 1
)

func packEntry(poolOff uintptr, gen uint64) uint64 {
	return (gen&entryGenMask)<<entryOffBits | uint64(poolOff>>4)
}

func unpackEntry(e uint64) (poolOff uintptr, gen uint64) {
	return uintptr(e&(1<<entryOffBits-1)) << 4, e >> entryOffBits
}

// ctl is a process's view of the control region.
type ctl struct {
	layout
	w []uint64
}

func (c *ctl) load(i int) uint64     { return atomic.LoadUint64(&c.w[i]) }
func (c *ctl) store(i int, v uint64) { atomic.StoreUint64(&c.w[i], v) }

// grant returns grant g's generation and owner slot (-1: free).
func (c *ctl) grant(g int) (gen uint64, slot int) { return unpackGrant(c.load(c.grantWord(g))) }

// push appends e to ring (p, c) and reports whether there was room. Only process p calls it
// (under its push lock).
func (c *ctl) push(p, cs int, e uint64) bool {
	r := c.ring(p, cs)
	t := c.load(r + lineWords)
	if t-c.load(r) >= uint64(c.ringCap) {
		return false
	}
	c.store(r+ringHdr+int(t%uint64(c.ringCap)), e)
	c.store(r+lineWords, t+1)
	return true
}

// drain hands every entry of ring (p, c) to f, oldest first, and returns how many. Only
// process c calls it (under its drain lock).
func (c *ctl) drain(p, cs int, f func(e uint64)) int {
	r := c.ring(p, cs)
	h, t := c.load(r), c.load(r+lineWords)
	if t-h > uint64(c.ringCap) { // a corrupt ring (a peer's bug): skip what cannot be real
		h = t - uint64(c.ringCap)
	}
	n := 0
	for ; h < t; h++ {
		f(c.load(r + ringHdr + int(h%uint64(c.ringCap))))
		c.store(r, h+1)
		n++
	}
	return n
}

// pending reports whether ring (p, c) holds entries.
func (c *ctl) pending(p, cs int) bool {
	r := c.ring(p, cs)
	return c.load(r+lineWords) != c.load(r)
}
