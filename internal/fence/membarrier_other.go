//go:build !linux || race

package fence

const available = false

// Heavy is never called in this build: Available is false.
func Heavy() { panic("fence: Heavy without membarrier") }
