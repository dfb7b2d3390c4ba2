package ipcpool

// The rings: ring (p, c) carries to process c the handles of its buffers that process p let
// go last (exports.go: the retirer delivers). Single producer (p, under its push lock),
// single consumer (c, under its drain lock); consistent at every store (an entry is written
// before the tail that publishes it, and read before the head that frees it), so a process
// killed at any instant leaves a ring the next process in its slot goes on using as it is.
//
// A ring is also memory every process can write: the consumer trusts neither its head and
// tail nor its entries. It takes at most the capacity per drain, indexes modulo the
// capacity, and checks each entry against its own records (exports.go), so a ring a peer
// corrupted yields entries that are dropped and counted, never a wrong free. A producer that
// finds the ring full (or corrupt) does not wait: it bumps the consumer's overflow word, and
// the consumer scans its entries for retired ones (drain.go). So no free ever waits on a
// peer.

// Ring entries: the entry's index in its holder's part of the export table (< 2^24) and the
// entry's generation.
func packRing(idx int, gen uint32) uint64 { return uint64(idx)<<32 | uint64(gen) }

func unpackRing(e uint64) (idx int, gen uint32) { return int(e >> 32), uint32(e) }

// push appends e to ring (p, c) and reports whether there was room.
func (c *ctl) push(p, cs int, e uint64) bool {
	r := c.ring(p, cs)
	h, t := c.load(r), c.load(r+lineWords)
	if t-h >= uint64(c.ringCap) { // full, or a head past the tail (corrupt): the consumer scans
		return false
	}
	c.store(r+ringHdr+int(t%uint64(c.ringCap)), e)
	c.store(r+lineWords, t+1)
	return true
}

// drain hands the entries of ring (p, c) to f, oldest first, at most the capacity of them, and
// returns how many. A ring whose tail is more than the capacity past its head (a peer's
// corruption) is taken from the last capacity entries.
func (c *ctl) drain(p, cs int, f func(e uint64)) int {
	r := c.ring(p, cs)
	h, t := c.load(r), c.load(r+lineWords)
	if t == h {
		return 0
	}
	if t-h > uint64(c.ringCap) {
		h = t - uint64(c.ringCap)
	}
	n := 0
	for ; h != t; h++ {
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
