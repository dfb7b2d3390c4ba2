//go:build race

package fakecuda

// RaceEnabled tells the tests of this package, internal and external, that the race detector
// is on: the stress tests run their default, short form even with PINMALLOC_LONG (Long; their
// interleavings, not their length, are what the detector needs).
const RaceEnabled = true
