package probe

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Pause's defaults: a sleep of DefaultPause at one call in DefaultEvery, which spreads a test
// of a few hundred helper calls over a few dozen pauses. Every is prime, so a test whose loop
// calls the helpers a fixed number of times per round is paused at a different step in each.
const (
	DefaultEvery = 13
	DefaultPause = 5 * time.Millisecond
)

// The environment variables that change Pause's defaults in the probe build:
// PINMALLOC_PROBE_EVERY, a count of calls (0 never pauses), and PINMALLOC_PROBE_PAUSE, a
// duration as time.ParseDuration reads it ("25ms").
const (
	EnvEvery = "PINMALLOC_PROBE_EVERY"
	EnvPause = "PINMALLOC_PROBE_PAUSE"
)

var (
	calls  atomic.Uint64
	config = sync.OnceValues(settings)
)

// Pause is called by the tests' shared helpers at each step. In the probe build it sleeps at
// one call in every (counted over the whole test binary, across goroutines), for the
// pause the environment asks for or the defaults; it panics, naming the variable, when either
// cannot be read. Without the tag it does nothing.
func Pause() {
	if !Enabled {
		return
	}
	every, pause := config()
	if every > 0 && calls.Add(1)%every == 0 {
		time.Sleep(pause)
	}
}

// settings reads Pause's environment variables, or panics naming the one that is malformed.
func settings() (every uint64, pause time.Duration) {
	every, pause = DefaultEvery, DefaultPause
	if s := os.Getenv(EnvEvery); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			panic(fmt.Sprintf("probe: %s=%q: want a count of calls (0: never pause)", EnvEvery, s))
		}
		every = n
	}
	if s := os.Getenv(EnvPause); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			panic(fmt.Sprintf("probe: %s=%q: want a duration such as 25ms", EnvPause, s))
		}
		pause = d
	}
	return every, pause
}
