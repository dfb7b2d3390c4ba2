package copyengine

// Close's error: what went wrong giving the Batcher's parts back, a device fault said once.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// closeError joins errs, the errors of Close's waits, frees, destroys and unload, nil ones left
// out. After a device fault the context's sticky error refuses every call alike: the errors that
// say nothing but that fault (onlyFault) are said once, by the first of them, after what Close
// keeps for a later Close (as errkind.Once says a fault once); the others stay whole.
func (b *Batcher) closeError(errs []error) error {
	var fault error
	var rest []error
	for _, err := range errs {
		switch {
		case err == nil:
		case onlyFault(err):
			if fault == nil {
				fault = errkind.Once(err) // the frees of several staging buffers, say: one fault
			}
		default:
			rest = append(rest, err)
		}
	}
	if fault == nil {
		return errors.Join(rest...)
	}
	what := "the device failed"
	if kept := b.kept(); kept != "" {
		what += ", and the driver refuses to give back " + kept + ", kept for a later Close"
	}
	said := fmt.Errorf("copyengine: Close: %s: %w", what, fault)
	return errors.Join(append([]error{said}, rest...)...)
}

// kept says what the Batcher still holds after a Close ("" for nothing): what the driver
// refused to give back, and the staging buffers a lost launch may read.
func (b *Batcher) kept() string {
	var parts []string
	if n := len(b.retired) + len(b.lost); n > 0 {
		parts = append(parts, units.Count(uint64(n), "staging buffer", "staging buffers"))
	}
	if n := len(b.held.dev); n > 0 {
		parts = append(parts, units.Count(uint64(n), "device buffer", "device buffers"))
	}
	n := len(b.held.streams)
	if b.side != 0 {
		n++
	}
	if n > 0 {
		parts = append(parts, units.Count(uint64(n), "stream", "streams"))
	}
	if n := len(b.held.events); n > 0 {
		parts = append(parts, units.Count(uint64(n), "event", "events"))
	}
	if b.mod != 0 {
		parts = append(parts, "the gather kernel")
	}
	if len(parts) > 1 {
		return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	}
	return strings.Join(parts, "")
}

// onlyFault reports whether err says nothing but a device fault: every error in its tree that
// wraps no other (the driver's result, a sentinel) matches pinmalloc.ErrDeviceFault.
func onlyFault(err error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		for _, e := range errs {
			if !onlyFault(e) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			return onlyFault(e)
		}
	}
	return errors.Is(err, pinmalloc.ErrDeviceFault)
}
