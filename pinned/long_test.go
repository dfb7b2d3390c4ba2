package pinned

import (
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// longRun reports whether the long form of the package's stress, soak and model tests runs:
// PINMALLOC_LONG=1 (CI's full run sets it), unless -short, the race detector or the invariant
// checks are on. The default form takes the same paths with fewer steps, rounds and buffers, so
// that go test ./... stays fast.
func longRun() bool {
	return os.Getenv("PINMALLOC_LONG") != "" && !testing.Short() && !raceEnabled && !invariants.Enabled
}

// LongRun is longRun for the package's external tests.
var LongRun = longRun

// RaceEnabled is raceEnabled for the package's external tests.
const RaceEnabled = raceEnabled
