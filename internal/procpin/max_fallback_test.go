//go:build pinmalloc_noprocpin && !race

package procpin

// maxID bounds the IDs of the sync.Pool build: a cached number per P, and more after a
// collection empties the pool (bounded generously for the test's length).
func maxID(procs int) int { return 64 * procs }
