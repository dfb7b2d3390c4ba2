package pattern

import (
	"bytes"
	"testing"
)

// TestFill checks every byte Fill writes against at, for periods that are and are not powers of
// two, lengths around their multiples, and an empty buffer.
func TestFill(t *testing.T) {
	for _, period := range []int{1, 3, 256, 251 * 256} {
		at := func(i int) byte { return byte(i%period*7 + i%period/5) }
		for _, n := range []int{0, 1, period - 1, period, period + 1, 3*period + 2, 1 << 20} {
			b := make([]byte, n)
			Fill(b, period, at)
			for i, v := range b {
				if v != at(i) {
					t.Fatalf("period %d, %d bytes: byte %d is %#x, want %#x", period, n, i, v, at(i))
				}
			}
		}
	}
}

// TestRandom checks that Random repeats from the same state, continues a sequence across calls
// (a buffer filled in two parts, at a multiple of 8, equals one filled at once), and that its
// bytes are spread: every byte value turns up in 64 KiB.
func TestRandom(t *testing.T) {
	x, y := uint64(5), uint64(5)
	a, b := make([]byte, 1<<16+3), make([]byte, 1<<16+3)
	Random(a, &x)
	Random(b[:4096], &y)
	Random(b[4096:], &y)
	if !bytes.Equal(a, b) || x != y {
		t.Fatal("the same state gave other bytes")
	}
	var seen [256]bool
	for _, v := range a {
		seen[v] = true
	}
	for v, ok := range seen {
		if !ok {
			t.Fatalf("byte %#x never drawn in %d bytes", v, len(a))
		}
	}
	Random(b, &y)
	if bytes.Equal(a, b) {
		t.Fatal("the next state gave the same bytes")
	}
}
