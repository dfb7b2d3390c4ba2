package errkind

import (
	"errors"
	"strings"

	"github.com/pinmalloc/pinmalloc"
)

// The rule that says a failure once: under the context's sticky error (after a device fault) the
// driver refuses every call alike, and a call that met it in several of its waits, destroys or
// give-backs says it once, with the first that met it, and keeps its other failures.

// Once joins errs (errors.Join), saying each failure once: the errors an errors.Join joins are
// taken apart, at any depth; nil ones are left out, and so is each that says the same as one
// kept before it (Same): both match pinmalloc.ErrDeviceFault (the context's sticky error), both
// hold the same driver result (the internal/cuda Result in their chains), or both have the same
// text. The first to say a failure is kept, in its place, unless a later one says it with more
// words (its text holds the first's whole: a wrap of it, "uvm: ...: cuda: X; a later Close tries
// again" after "cuda: X"), which takes that place. One error kept is returned as it is; none,
// nil.
//
// An error that wraps several (fmt.Errorf's with two %w, Wrap's) but has a text of its own is
// not taken apart: its text says more than its parts.
func Once(errs ...error) error {
	var kept []error
	for _, err := range errs {
		kept = onceEach(err, kept)
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return errors.Join(kept...)
}

// onceEach appends to kept the errors err joins (err itself when it is no errors.Join) that say
// nothing one of kept says (Once); one that says what one of kept says and more (its text holds
// the kept one's) takes its place.
func onceEach(err error, kept []error) []error {
	if err == nil {
		return kept
	}
	if parts, ok := JoinParts(err); ok {
		for _, p := range parts {
			kept = onceEach(p, kept)
		}
		return kept
	}
	for i, k := range kept {
		if Same(k, err) {
			if t := err.Error(); len(t) > len(k.Error()) && strings.Contains(t, k.Error()) {
				kept[i] = err // it says k and more: k's place is its
			}
			return kept
		}
	}
	return append(kept, err)
}

// JoinParts returns the errors err joins when it is an errors.Join (it wraps several, and its
// text is theirs, a line each), and whether it is one: an error with a text of its own that
// wraps several (two %w, Wrap) is not taken apart.
func JoinParts(err error) ([]error, bool) {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil, false
	}
	parts := j.Unwrap()
	texts := make([]string, len(parts))
	for i, p := range parts {
		if p == nil {
			return nil, false
		}
		texts[i] = p.Error()
	}
	return parts, strings.Join(texts, "\n") == err.Error()
}

// Same reports whether a and b, neither nil, say the same failure, so that an error that
// joins or wraps both says one (Once's rule): both match pinmalloc.ErrDeviceFault, both hold
// the same driver result, or both have the same text.
func Same(a, b error) bool {
	if a == nil || b == nil {
		return false
	}
	if errors.Is(a, pinmalloc.ErrDeviceFault) && errors.Is(b, pinmalloc.ErrDeviceFault) {
		return true
	}
	if r, ok := driverResult(a); ok {
		if s, ok := driverResult(b); ok && r == s {
			return true
		}
	}
	return a.Error() == b.Error()
}

// driverResulter is an error the driver returned (internal/cuda's Result), which says its result
// code: two errors holding the same one say the same failure (Once).
type driverResulter interface {
	error
	DriverResult() int
}

// driverResult returns the result code of the driver's error in err's chain, if there is one.
func driverResult(err error) (int, bool) {
	var r driverResulter
	if errors.As(err, &r) {
		return r.DriverResult(), true
	}
	return 0, false
}
