//go:build !invariants && !race

package heap

// holdSeen is page.holdSeen in ordinary builds: nothing, so that a page is no larger and the
// holds no slower for the check the invariants build makes (holdseen_on.go).
type holdSeen struct{}

// mark does nothing here.
func (*holdSeen) mark() {}

// seen reports false here: no hold is recorded.
func (*holdSeen) seen() bool { return false }
