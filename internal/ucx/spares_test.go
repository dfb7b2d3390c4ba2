//go:build cgo && linux

package ucx

import "testing"

// TestSpareDataEvents: the events that carry a copy of a data message's bytes (tcp lends its
// receive buffer to the callback only) come from the worker's spares, up to PM_SPARE_BYTES of
// them, each with its own message's bytes; a change of the bound on a message's length drops
// the spares of the old size. A malloc and free of each had glibc give the memory back to the
// kernel and fault it in again: puts over tcp ran 2 – 3 times slower.
func TestSpareDataEvents(t *testing.T) {
	why := map[int]string{-1: "no memory, or an event missing", 1: "an event's bytes are not its message's",
		2: "the second batch did not take the spares the first left", 3: "more spares kept than PM_SPARE_BYTES allows, or fewer than released",
		4: "a change of the data bound kept spares of the old size", 5: "pm_spares_free left spares"}
	for _, c := range []struct{ dataMax, len, n int }{
		{32 << 10, 32 << 10, 300}, // more than PM_SPARE_BYTES holds
		{32 << 10, 100, 10},
		{64 << 10, 64 << 10, 40},
		{4 << 10, 1, 1},
	} {
		if rc := spareCheck(c.dataMax, c.len, c.n); rc != 0 {
			t.Errorf("%d messages of %d bytes, data bound %d: %s", c.n, c.len, c.dataMax, why[rc])
		}
	}
}
