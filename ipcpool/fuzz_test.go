package ipcpool

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Fuzz targets for everything read from a peer: the socket's messages and hello, the rings,
// the grant words and the export entries of the control region. Each must refuse what is not
// valid and never panic; what it accepts must be within bounds.

func FuzzDecodeMsg(f *testing.F) {
	for _, m := range []msg{{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, {op: opGrant, seq: 3, a: 2, b: 1e9},
		{op: opRelease, a: 7, b: 1}, {op: opReply, seq: 9, a: stOK, b: 4}, {op: 0}, {op: 1 << 31}} {
		b := m.encode()
		f.Add(b[:])
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMsg(b)
		if err != nil {
			return
		}
		if len(b) != msgSize || m.op == 0 || m.op > opMax {
			t.Fatalf("accepted %x as %+v", b, m)
		}
		if e := m.encode(); !bytes.Equal(e[:], b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, m, e)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	good := hello{pool: 7, slot: 1, serial: 1, layout: layout{regions: 2, regionSize: 4 << 20, grantSize: 2 << 20,
		slots: 4, ringCap: 16, exports: 8}, epoch: 1}
	good.ctlSize = good.ctlBytes()
	f.Add(good.encode())
	bad := good
	bad.ringCap = 1 << 62
	f.Add(bad.encode())
	bad = good
	bad.grantSize = 16
	f.Add(bad.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		if err := h.check(); err != nil || h.slot < 0 || h.slot >= h.slots || h.ctlSize < h.ctlBytes() {
			t.Fatalf("accepted %+v", h)
		}
		// Everything sized by it stays sane: the words of the control region fit in its size.
		if uint64(h.words())*8 > uint64(h.ctlSize) || h.poolBytes() == 0 || h.poolBytes() > maxPoolSize {
			t.Fatalf("a hello whose geometry overflows: %+v", h)
		}
	})
}

// testCtl makes a control region in Go memory for geometry l, its words from seed bytes.
func testCtl(l layout, seed []byte) ctl {
	w := make([]uint64, l.words())
	for i := 0; i+8 <= len(seed) && i/8 < len(w); i += 8 {
		w[i/8] = binary.LittleEndian.Uint64(seed[i:])
	}
	return newCtl(l, w)
}

var fuzzLayout = layout{regions: 2, regionSize: 4 << 20, grantSize: 2 << 20, slots: 3, ringCap: 4, exports: 4}

func FuzzRing(f *testing.F) {
	f.Add([]byte{}, uint64(1), uint64(2))
	f.Add(bytes.Repeat([]byte{0xff}, 64), uint64(1<<40), uint64(0))
	f.Fuzz(func(t *testing.T, seed []byte, head, tail uint64) {
		c := testCtl(fuzzLayout, seed)
		r := c.ring(1, 2)
		c.store(r, head)
		c.store(r+lineWords, tail)
		n := 0
		got := c.drain(1, 2, func(e uint64) {
			n++
			i, gen := unpackRing(e)
			if i < 0 || packRing(i, gen) != e {
				t.Fatalf("entry %#x unpacks to %d, %d", e, i, gen)
			}
		})
		if got != n || n > c.ringCap {
			t.Fatalf("drained %d (%d seen) of a ring of %d", got, n, c.ringCap)
		}
		if c.pending(1, 2) {
			t.Fatal("entries left after a drain")
		}
		for i := 0; i < 2*c.ringCap; i++ {
			if !c.push(1, 2, uint64(i)) && i < c.ringCap {
				t.Fatalf("push %d refused on a drained ring", i)
			}
		}
		// The neighbours' words are untouched by this ring's pushes and drains.
		orig := testCtl(fuzzLayout, seed)
		if r2 := c.ring(2, 0); c.load(r2) != orig.load(r2) {
			t.Fatal("a push wrote into another ring")
		}
	})
}

func FuzzGrantWord(f *testing.F) {
	f.Add(uint64(0))
	f.Add(packGrant(5, gFenced, 299))
	f.Fuzz(func(t *testing.T, w uint64) {
		gen, state, slot := unpackGrant(w)
		if slot < -1 || slot >= 1<<16 || state < 0 || state > 0xff {
			t.Fatalf("%#x unpacks to slot %d state %d", w, slot, state)
		}
		if slot >= 0 && gen < 1<<40 && packGrant(gen, state, slot) != w {
			t.Fatalf("%#x does not pack back", w)
		}
	})
}

// FuzzExportEntry: a handle resolved against an export table of arbitrary words is either
// refused or names a range inside one region of the pool, agreeing with its entry.
func FuzzExportEntry(f *testing.F) {
	f.Add([]byte{}, uint64(7), uint32(0), uint32(0), uint64(0), uint64(64), 1, uint32(3))
	f.Fuzz(func(t *testing.T, seed []byte, pool uint64, entry, gen uint32, off, n uint64, i int, rgen uint32) {
		c := testCtl(fuzzLayout, seed)
		p := &Process{layout: fuzzLayout, id: pool, slot: 1, serial: 1, c: c, ex: newExportState(fuzzLayout.exports)}
		h := Handle{Pool: pool, Entry: entry, Gen: gen, Offset: off, Length: n}
		if e, err := p.resolve(h); err == nil {
			if e < 0 || e >= p.slots*p.exports || !p.sameRegion(h.Offset, h.Length) ||
				c.load(c.entry(e)+eOffset) != off || c.load(c.entry(e)+eLength) != n {
				t.Fatalf("resolved %v to entry %d", h, e)
			}
		}
		// A ring entry naming anything: refused (no record), never a panic.
		p.takeRetired(i, rgen)
		if p.st.dropped.Load() != 1 {
			t.Fatal("a ring entry naming no record was not dropped")
		}
	})
}
