//go:build pinmalloc_noprocpin && race

package procpin

import "math"

// maxID does not bound the IDs of the sync.Pool build under the race detector, whose sync.Pool
// drops a quarter of what is put in it at random: about one ID in four calls is a new one.
func maxID(int) int { return math.MaxInt - 1 }
