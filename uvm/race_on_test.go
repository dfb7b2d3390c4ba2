//go:build race

package uvm_test

// raceEnabled tells the tests that the race detector is on: tests whose work is one
// goroutine's run fewer steps or skip (the non-race runs take them at full length), and those
// that race goroutines run fewer rounds.
const raceEnabled = true
