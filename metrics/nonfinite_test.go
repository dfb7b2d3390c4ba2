package metrics

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNonFiniteCommitSeconds: a function given to AddFunc may report CommitSeconds as NaN, an
// infinity or a negative number (a ratio of its own, say), which no counter can be. The
// counter pinmalloc_host_commit_seconds_total is then left out of the scrape, the source's
// other series kept, and the expvar Var reports 0 for it. The Var's JSON was "" (encoding/json
// refuses NaN), which made the whole of expvar's /debug/vars invalid JSON, and the scrape
// exported the counter as NaN or below zero.
func TestNonFiniteCommitSeconds(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
		c := New()
		f := func() Figures { return Figures{Committed: 4096, CommitSeconds: v} }
		if err := c.AddFunc("f", Host, f); err != nil {
			t.Fatal(err)
		}
		if n := testutil.CollectAndCount(only(c, "pinmalloc_host_commit_seconds_total")); n != 0 {
			t.Errorf("CommitSeconds %v: %d commit_seconds_total series; want none", v, n)
		}
		if n := testutil.CollectAndCount(only(c, "pinmalloc_host_committed_bytes")); n != 1 {
			t.Errorf("CommitSeconds %v: %d committed_bytes series; want 1", v, n)
		}
		var js map[string]map[string]any
		if err := json.Unmarshal([]byte(c.Var().String()), &js); err != nil {
			t.Errorf("CommitSeconds %v: the Var is not JSON: %v", v, err)
			continue
		}
		if got := js["f"]["commit_seconds"]; got != 0.0 || js["f"]["committed"] != 4096.0 {
			t.Errorf("CommitSeconds %v: the Var says %v", v, js["f"])
		}
	}
	lint(t, func() *Collector {
		c := New()
		_ = c.AddFunc("f", Host, func() Figures { return Figures{CommitSeconds: math.NaN()} })
		return c
	}())
}
