//go:build invariants || race

package heap

import "sync/atomic"

// holdSeen is page.holdSeen where internal/invariants.Enabled is true: set by the page's
// first hold that shares it (enterHold) or takes the compare-and-swap (page.hold), and never
// cleared while the page lives. The rule that such a page never becomes exclusive again is
// history, not state (keepShared, which enforces it, is set for other reasons too), so this
// bit is what reexclusive and verify check it against. Ordinary builds carry none
// (holdseen_off.go).
type holdSeen struct{ b atomic.Bool }

// mark records a hold; its store comes after the holder's store of keepShared.
func (s *holdSeen) mark() {
	if !s.b.Load() {
		s.b.Store(true)
	}
}

// seen reports whether a hold was ever marked.
func (s *holdSeen) seen() bool { return s.b.Load() }
