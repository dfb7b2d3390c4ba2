package heap

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The property tests' checkers: the shadow of live granules and the pattern of every block.

// shadow is an independent record of which 16-byte granules of the region are live: marking a
// block that overlaps a live one is a failure.
type shadow struct {
	base, size uintptr
	bits       []uint64
}

func newShadow(base, size uintptr) *shadow {
	return &shadow{base: base, size: size, bits: make([]uint64, size/16/64+1)}
}

// mark sets (set) or clears the bits of the granules of [p, p+n), failing if one already was.
func (s *shadow) mark(t testing.TB, p, n uintptr, set bool) {
	if p < s.base || p+n > s.base+s.size {
		t.Fatalf("block [%#x, +%d) outside the region [%#x, +%d)", p, n, s.base, s.size)
	}
	if g, ok := s.flip(p, n, set); !ok {
		t.Fatalf("block [%#x, +%d): granule %d already %v (overlap or lost block)", p, n, g, set)
	}
}

// flip flips the bits of the granules of [p, p+n) a word at a time (a bit at a time was a third
// of TestProperty's time) once it has checked that none already was set (or clear); where one
// was, it returns the first such granule and false, changing nothing.
func (s *shadow) flip(p, n uintptr, set bool) (uintptr, bool) {
	start, end := (p-s.base)/16, (p+n-s.base+15)/16
	for pass := range 2 {
		for g := start; g < end; {
			w, lo := g/64, g%64
			hi := min(64, lo+end-g) // the word's bits [lo, hi) are the block's
			m := ^uint64(0) >> (64 - hi) &^ (1<<lo - 1)
			if pass == 1 {
				s.bits[w] ^= m
			} else if already := (s.bits[w] ^ wordIf(!set)) & m; already != 0 {
				return w*64 + uintptr(bits.TrailingZeros64(already)), false
			}
			g += hi - lo
		}
	}
	return 0, true
}

// wordIf is a word of ones if b, else zero.
func wordIf(b bool) uint64 {
	if b {
		return ^uint64(0)
	}
	return 0
}

// TestShadowFlip checks the shadow's word-wise flips against a granule at a time: the bits set,
// and the first granule found already set or clear.
func TestShadowFlip(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 2))
	const size = 64 << 10
	s, ref := newShadow(1<<20, size), make([]bool, size/16)
	var outcomes [2]int
	for range 5000 {
		off, set := uintptr(r.IntN(size)), r.IntN(2) == 0
		n := uintptr(1 + r.IntN(size-int(off)))
		if r.IntN(4) != 0 {
			n = min(n, uintptr(1+r.IntN(3000)))
		}
		want, wantOK := uintptr(0), true
		for g := off / 16; g < (off+n+15)/16; g++ {
			if ref[g] == set {
				want, wantOK = g, false
				break
			}
		}
		got, ok := s.flip(s.base+off, n, set)
		if ok != wantOK || got != want {
			t.Fatalf("seed %d: flip [%d, +%d) to %v = %d, %v; want %d, %v", seed, off, n, set, got, ok, want, wantOK)
		}
		if outcomes[b2i(ok)]++; !ok {
			continue
		}
		for g := off / 16; g < (off+n+15)/16; g++ {
			ref[g] = set
		}
	}
	for g, v := range ref {
		if got := s.bits[g/64]>>(g%64)&1 != 0; got != v {
			t.Fatalf("seed %d: granule %d is %v, want %v", seed, g, got, v)
		}
	}
	if outcomes[0] < 100 || outcomes[1] < 100 {
		t.Fatalf("seed %d: %d flips refused, %d done: want both", seed, outcomes[0], outcomes[1])
	}
}

type liveBlock struct {
	p, n uintptr
	seed byte
}

// fill writes a pattern over the block (all of it when small, ends and one byte a page when
// large); check verifies it.
func fill(b liveBlock, verify bool) (bad int) {
	buf := mem.Bytes(b.p, b.n)
	do := func(i uintptr) {
		v := b.seed + byte(i*7)
		if verify {
			if buf[i] != v {
				bad++
			}
		} else {
			buf[i] = v
		}
	}
	if b.n <= 4096 { // 256 bytes at a time: the pattern's period, fillPeriods[b.seed]
		per := &fillPeriods[b.seed]
		for i := uintptr(0); i < b.n; i += 256 {
			c := buf[i:min(i+256, b.n)]
			switch {
			case !verify:
				copy(c, per[:])
			case !bytes.Equal(c, per[:len(c)]):
				for k := range c {
					if c[k] != per[k] {
						bad++
					}
				}
			}
		}
		return bad
	}
	for i := uintptr(0); i < 64; i++ {
		do(i)
		do(b.n - 1 - i)
	}
	for i := uintptr(4096); i < b.n; i += 4096 {
		do(i)
	}
	return bad
}

// fillPeriods[seed] is the first 256 bytes of fill's pattern for seed, the period of
// seed + byte(i*7).
var fillPeriods = func() (p [256][256]byte) {
	for seed := range p {
		for i := range p[seed] {
			p[seed][i] = byte(seed) + byte(i*7)
		}
	}
	return p
}()

// TestFillPattern checks fill's 256-byte copies against its formula, and that a check counts
// every byte changed.
func TestFillPattern(t *testing.T) {
	for _, n := range []int{1, 255, 256, 257, 4096} {
		buf := make([]byte, n)
		b := liveBlock{p: mem.Addr(buf), n: uintptr(n), seed: 200}
		fill(b, false)
		for i, v := range buf {
			if want := 200 + byte(i*7); v != want {
				t.Fatalf("fill of %d bytes: byte %d is %d, want %d", n, i, v, want)
			}
		}
		buf[0]++
		buf[n-1]++
		buf[n/2]++
		if bad, want := fill(b, true), min(n, 3); bad != want {
			t.Fatalf("check of %d bytes with %d changed: %d bad", n, want, bad)
		}
		runtime.KeepAlive(buf)
	}
}
