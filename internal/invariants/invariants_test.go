package invariants

import "testing"

// TestEnabledFollowsTags checks Enabled against the tags the test binary was built with.
func TestEnabledFollowsTags(t *testing.T) {
	if Enabled != (tagInvariants || raceEnabled) {
		t.Fatalf("Enabled = %v, want %v (tag invariants %v, race %v)", Enabled, tagInvariants || raceEnabled, tagInvariants, raceEnabled)
	}
}

// TestDue checks how often Due lets a check run: every call with the tag, one in RaceEvery
// (the first of each run of RaceEvery) under -race alone, never otherwise.
func TestDue(t *testing.T) {
	var n uint32
	ran := 0
	for range 10 * RaceEvery {
		if Due(&n) {
			ran++
		}
	}
	want := 0
	switch {
	case tagInvariants:
		want = 10 * RaceEvery
	case raceEnabled:
		want = 10
	}
	if ran != want {
		t.Fatalf("Due ran %d of %d calls, want %d (tag %v, race %v)", ran, 10*RaceEvery, want, tagInvariants, raceEnabled)
	}
}
