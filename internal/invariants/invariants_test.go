package invariants

import "testing"

// TestEnabledFollowsTags checks Enabled against the tags the test binary was built with.
func TestEnabledFollowsTags(t *testing.T) {
	if Enabled != (tagInvariants || raceEnabled) {
		t.Fatalf("Enabled = %v, want %v (tag invariants %v, race %v)", Enabled, tagInvariants || raceEnabled, tagInvariants, raceEnabled)
	}
}
