// Package pattern writes the periodic byte patterns the module's tests fill and check buffers
// with, at the speed of a copy: the first period is computed a byte at a time, the rest doubled
// by copies. A byte loop over the megabytes a test moves was most of several tests' time.
package pattern

// Fill sets b[i] to at(i) for every i, where at repeats every period bytes (at(i+period) ==
// at(i)): it calls at for the first period only and doubles that by copies.
func Fill(b []byte, period int, at func(i int) byte) {
	n := min(len(b), period)
	for i := range n {
		b[i] = at(i)
	}
	for ; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
