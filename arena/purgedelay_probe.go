//go:build pinmalloc_probe

package arena

import "time"

// DefaultPurgeDelay is 1 µs in the tests' probe build (the tag pinmalloc_probe, see
// internal/probe): the idle purges of every arena, pool and heap left at the default run
// whenever they may, to find the tests that assumed they would not.
const DefaultPurgeDelay = time.Microsecond
