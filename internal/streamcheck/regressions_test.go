package streamcheck

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// regression is a shrunk failing sequence the checker found, replayed as it was found (the
// configurations have one pool shard and no timed purge, so a replay is deterministic).
type regression struct {
	name string
	what string // the failure it showed
	cfg  Config
	ops  []Op
}

// TestRegressions replays every sequence the checker shrank a failure to; each must pass.
func TestRegressions(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	rig := Rig{F: f, Dev: f.Open(t, 0)}
	for _, c := range regressions {
		t.Run(c.name, func(t *testing.T) {
			res := Replay(rig, c.cfg, c.ops)
			if res.Failure != nil {
				t.Errorf("%v (found as %q): %v\n%s", c.cfg, c.what, res.Failure, Listing(c.ops))
			}
		})
	}
}

// regressions are the shrunk sequences of the failures found on the code before the fixes of
// issue 25 (see the report of the commit that added each).
var regressions = []regression{}
