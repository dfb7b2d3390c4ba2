//go:build race

package fakecuda

// RaceEnabled tells the tests of this package, internal and external, that the race detector
// is on: the stress tests run as many rounds as with -short (their interleavings, not their
// length, are what the detector needs), so that CI's race run stays within its time.
const RaceEnabled = true
