package fakecuda

import (
	"os"
	"testing"
)

// Long tells the tests of this package, internal and external, whether to run the long form of
// their stress tests: PINMALLOC_LONG=1 (CI's full run sets it), unless -short or the race
// detector is on. The default form takes the same paths with fewer rounds, so that go test ./...
// stays fast.
func Long() bool { return os.Getenv("PINMALLOC_LONG") != "" && !testing.Short() && !RaceEnabled }
