package memlocktest

import (
	"math"
	"strconv"
	"testing"
)

// TestVmLck: the VmLck line's kB are returned in bytes; a figure whose bytes do not fit in a
// uint64 (past 2^54 kB, from a fake or a broken /proc) is an error, not the figure wrapped.
func TestVmLck(t *testing.T) {
	for _, c := range []struct {
		status  string
		n       uint64
		ok, bad bool
	}{
		{"Name:\tx\nVmLck:\t    1024 kB\nVmPin:\t0 kB\n", 1 << 20, true, false},
		{"VmLck:\t0 kB\n", 0, true, false},
		{"Name:\tx\n", 0, false, false},
		{"VmLck:\tmany kB\n", 0, false, true},
		{"VmLck:\t" + strconv.FormatUint(math.MaxUint64>>10, 10) + " kB\n",
			math.MaxUint64 >> 10 << 10, true, false},
		{"VmLck:\t" + strconv.FormatUint(1<<54, 10) + " kB\n", 0, false, true},
		{"VmLck:\t" + strconv.FormatUint(1<<54+1, 10) + " kB\n", 0, false, true},
		{"VmLck:\t" + strconv.FormatUint(math.MaxUint64, 10) + " kB\n", 0, false, true},
	} {
		n, ok, err := vmLck([]byte(c.status))
		if n != c.n || ok != c.ok || (err != nil) != c.bad {
			t.Errorf("vmLck(%q) = %d, %v, %v; want %d, %v, error %v",
				c.status, n, ok, err, c.n, c.ok, c.bad)
		}
	}
}
