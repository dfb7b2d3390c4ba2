// Package pattern writes the byte patterns the module's tests fill and check buffers with, at
// the speed of a copy: periodic ones (Fill) computed for one period and doubled by copies, and
// pseudo-random ones (Random) eight bytes at a time. A byte loop over the megabytes a test
// moves was most of several tests' time.
package pattern

import (
	"encoding/binary"
	"fmt"
)

// Fill sets b[i] to at(i) for every i, where at repeats every period bytes (at(i+period) ==
// at(i)): it calls at for the first period only and doubles that by copies. A period below 1
// panics.
func Fill(b []byte, period int, at func(i int) byte) {
	if period < 1 {
		panic(fmt.Sprintf("pattern: Fill with period %d (want 1 or more)", period))
	}
	n := min(len(b), period)
	for i := range n {
		b[i] = at(i)
	}
	for ; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// Random fills b with pseudo-random bytes, the words of the splitmix64 sequence whose state is
// *x, which it advances: the same state gives the same bytes.
func Random(b []byte, x *uint64) {
	var w [8]byte
	for len(b) > 0 {
		*x += 0x9e3779b97f4a7c15
		z := *x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(w[:], z^z>>31)
		b = b[copy(b, w[:]):]
	}
}
