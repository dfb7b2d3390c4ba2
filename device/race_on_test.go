//go:build race

package device

// raceEnabled tells the tests that the race detector is on: the model and stress tests run
// fewer seeds or jobs (their goroutines still interleave; the non-race runs take them at full
// length).
const raceEnabled = true
