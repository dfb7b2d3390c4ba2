//go:build !linux || race

package fence

func available() bool { return false }

func decided() bool { return true } // nothing to register

// Heavy is never called in this build: Available is false.
func Heavy() { panic("fence: Heavy without membarrier") }
