package units

import "testing"

// TestBytesRoundsUp: a value that rounds up to the next decade or unit is written there, not
// as "1024 KiB", "100.0 MiB" or "10.00 KiB" (four digits, or 1024 of a unit).
func TestBytesRoundsUp(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{1<<20 - 1, "1.00 MiB"}, {1<<20 - 24, "1.00 MiB"}, {100<<20 - 1, "100 MiB"},
		{10<<10 - 1, "10.0 KiB"}, {1023 << 10, "1023 KiB"},
		{1<<64 - 1, "16 EiB"}, {99_990, "97.6 KiB"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
