//go:build !pinmalloc_noprocpin

package procpin

// maxID is the largest ID the build can return with procs Ps.
func maxID(procs int) int { return procs - 1 }
