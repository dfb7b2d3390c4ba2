package main

import (
	"errors"
	"strings"
	"testing"
)

// TestHugeFreeFailureIsAnError checks that a huge case whose block was allocated but whose free
// or close then failed is an error of the case (said in the tables, failing the run), not an
// allocation that went well: the huge target must not read MET on it.
func TestHugeFreeFailureIsAnError(t *testing.T) {
	var rs []result
	for _, sz := range hugeSizes {
		set := resultSet{c: "huge/" + sizeName(sz), impl: "pinmalloc-pool"}
		h := hugeResult{ok: true, ns: 1e6}
		if sz == hugeCapacity {
			h.err = errors.New("pinned: close: 1 buffer still allocated")
		}
		set.huge(sz, h)
		rs = append(rs, set.out...)
	}
	c := "huge/" + sizeName(hugeCapacity)
	if e, failed := failure(rs, c, "pinmalloc-pool"); !failed || !strings.Contains(e, "still allocated") {
		t.Errorf("failure on %s = %q, %v; want the close's error", c, e, failed)
	}
	if got := failedCases(rs); len(got) != 1 || got[0] != "pinmalloc-pool on "+c {
		t.Errorf("failedCases = %q, want pinmalloc-pool on %s", got, c)
	}
	for _, tg := range evaluateTargets(rs) {
		if tg.Name == "huge-up-to-capacity" && tg.Status == met {
			t.Errorf("huge-up-to-capacity reads MET on a pool whose close failed: %+v", tg)
		}
	}
}
