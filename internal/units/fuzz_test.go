package units

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzBytes checks Bytes on any count: exact below 1 KiB; above, a number in [1, 1024) of the
// largest unit that fits (or EiB), within half a unit of its last digit of the count, with
// three significant digits (four from 1000, none after the point for a whole number).
func FuzzBytes(f *testing.F) {
	for _, n := range []uint64{0, 1023, 1024, 1<<20 - 1, 100<<20 - 1, 10<<10 - 1, 1<<64 - 1, 1 << 63,
		1023<<10 + 1023, 99_990, 999_999} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n uint64) {
		s := Bytes(n)
		num, unit, ok := strings.Cut(s, " ")
		if n < 1024 {
			if s != strconv.FormatUint(n, 10)+" B" {
				t.Fatalf("Bytes(%d) = %q", n, s)
			}
			return
		}
		u := strings.Index("KMGTPE", unit[:min(1, len(unit))])
		v, err := strconv.ParseFloat(num, 64)
		if !ok || u < 0 || unit[1:] != "iB" || err != nil || v < 1 || v >= 1024 && u < 5 {
			t.Fatalf("Bytes(%d) = %q", n, s)
		}
		digits := len(strings.ReplaceAll(num, ".", ""))
		whole := !strings.Contains(num, ".")
		_, frac, _ := strings.Cut(num, ".")
		half := 0.5 * math.Pow(10, -float64(len(frac))) * math.Pow(1024, float64(u+1))
		if diff := math.Abs(v*math.Pow(1024, float64(u+1)) - float64(n)); diff > half*1.000001 ||
			!whole && digits != 3 || digits > 4 || digits == 4 && v < 1000 {
			t.Fatalf("Bytes(%d) = %q (off by %g)", n, s, diff)
		}
	})
}
