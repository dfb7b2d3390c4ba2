package cudamem

import (
	"errors"
	"slices"
)

// joinOnce joins errs, leaving out nil ones and those whose text an earlier one had: under the
// context's sticky error (after a device fault) the driver refuses every call of a give-back
// alike, and the refusal is said once.
func joinOnce(errs []error) error {
	var out []error
	for _, err := range errs {
		said := func(e error) bool { return e.Error() == err.Error() }
		if err != nil && !slices.ContainsFunc(out, said) {
			out = append(out, err)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}
