package main

import (
	"bytes"
	"regexp"
	"testing"
)

// TestLiveCountSaysWhatItCounts: the count of buffers is said as what it is, buffers held by
// the pipeline from before their Alloc to after their Free, which the pool's live buffers never
// pass. It said "at most 3 buffers live at once", counted from after the Alloc (a buffer just
// allocated was not counted yet) to after the Free (one freed still was): neither exact nor a
// bound.
func TestLiveCountSaysWhatItCounts(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-size", "3000000", "-chunk", "1048576", "-workers", "1", "-inflight", "1"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	re := regexp.MustCompile(`at most [1-3] buffers held at once \(each from before its Alloc to after its Free\), peak committed`)
	if !re.MatchString(out.String()) {
		t.Errorf("output lacks %q:\n%s", re, out.String())
	}
}
