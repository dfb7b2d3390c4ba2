package device

import (
	"errors"
	"strings"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// A fault of the device (the context's sticky error) is one failure, however many of a call's
// waits meet it: Sync's wait for the deferred frees, then the synchronize of the context that
// would answer the streams it refused, then Trim's wait for the legacy stream, each fail with
// it. The call says it once, with the first wait that met it, and keeps its other failures.

// faultOnce returns err, an error that has cuda.ErrDeviceFault in its chain, with the errors
// joined into it (errors.Join, at any depth) that say the device fault again after the first
// one dropped: the first, which matches ErrDeviceFault's kinds and the driver's error, and the
// errors that are not the fault stay, joined in their order.
func faultOnce(err error) error {
	var kept []error
	said := false
	for _, e := range joined(err, nil) {
		if errors.Is(e, cuda.ErrDeviceFault) {
			if said {
				continue
			}
			said = true
		}
		kept = append(kept, e)
	}
	if len(kept) == 1 {
		return kept[0]
	}
	return errors.Join(kept...)
}

// joined appends to errs the errors err joins, errors.Join's at any depth, or err itself when it
// is no such join. An error that wraps several (fmt.Errorf's with two %w, errkind.Wrap's) but has
// a text of its own is not a join: its text is not its parts' a line each.
func joined(err error, errs []error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return append(errs, err)
	}
	parts := j.Unwrap()
	texts := make([]string, len(parts))
	for i, p := range parts {
		if p == nil {
			return append(errs, err)
		}
		texts[i] = p.Error()
	}
	if strings.Join(texts, "\n") != err.Error() {
		return append(errs, err)
	}
	for _, p := range parts {
		errs = joined(p, errs)
	}
	return errs
}
