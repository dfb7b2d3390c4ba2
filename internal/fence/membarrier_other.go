//go:build !linux || race

package fence

func available() bool { return false }

// Heavy is never called in this build: Available is false.
func Heavy() { panic("fence: Heavy without membarrier") }
