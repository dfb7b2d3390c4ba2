package invariants

// RaceEvery is how often Due lets a check run under the race detector alone (without the tag
// invariants): once in RaceEvery calls. The race detector makes a walk of the bookkeeping
// several times dearer, a check that runs after every step of a long test would make the race
// run of the tree crawl, and a race run is after races first; one step in RaceEvery still
// checks the bookkeeping of every test thousands of times.
const RaceEvery = 64

// Due reports whether a check guarded by Enabled runs at this call, counting the calls in *n:
// at every call with the tag invariants, at one call in RaceEvery under -race alone, never
// when Enabled is false. n belongs to the caller (a field of the checked structure, under its
// owner's lock or single owner).
func Due(n *uint32) bool {
	if !Enabled {
		return false
	}
	if tagged {
		return true
	}
	*n++
	return *n%RaceEvery == 1
}
