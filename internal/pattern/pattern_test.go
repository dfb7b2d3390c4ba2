package pattern

import "testing"

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
