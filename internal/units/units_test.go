package units

import "testing"

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.50 KiB"}, {10 << 10, "10 KiB"},
		{15 << 19, "7.50 MiB"}, {123 << 20, "123 MiB"}, {1<<30 + 1<<29, "1.50 GiB"}, {1 << 60, "1 EiB"}, {150 << 30, "150 GiB"}, {12_345_678, "11.8 MiB"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0 pages"}, {1, "1 page"}, {2, "2 pages"}, {1000, "1000 pages"}} {
		if got := Count(c.n, "page"); got != c.want {
			t.Errorf("Count(%d, page) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Count(2, "miss", "misses"); got != "2 misses" {
		t.Errorf("Count(2, miss, misses) = %q", got)
	}
}
