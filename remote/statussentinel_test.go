package remote

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestStatusErrWrapsASentinel: every error an operation's status gives (statusErr) wraps one of
// the package's sentinels, as errors.go promises, and UCX's status where UCX gave one. A status
// of UCX's own (out of memory, no resource, an invalid parameter, an internal error: none a
// peer's) wrapped only the status before: errors.Is matched none of the sentinels.
func TestStatusErrWrapsASentinel(t *testing.T) {
	sentinels := []error{ErrNoUCX, ErrClosed, ErrDescriptor, ErrOutOfRange, ErrNotRegistered,
		ErrPeer, ErrBusy, ErrNotSupported, ErrTooLarge, ErrProtocol, ErrUCX}
	w := &Worker{}
	statuses := []int32{stRefused, stMemType, stTruncated, stBusy, stEnded}
	for st := int32(-1); st >= -90; st-- { // UCS_ERR_NO_MESSAGE (-1) to past UCS_ERR_LAST's range
		statuses = append(statuses, st)
	}
	for _, st := range statuses {
		err := w.statusErr(nil, st)
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("status %d: %v matches none of remote's sentinels", st, err)
		}
		if st < 0 && st != stEnded && !isOwn(st) {
			var s ucx.Status
			if !errors.As(err, &s) || int32(s) != st {
				t.Errorf("status %d: %v does not wrap UCX's status", st, err)
			}
		}
	}
	err := w.statusErr(nil, -4) // UCS_ERR_NO_MEMORY
	if !errors.Is(err, ErrUCX) || !errors.Is(err, pinmalloc.ErrRefused) {
		t.Errorf("UCX out of memory: %v; want ErrUCX, pinmalloc.ErrRefused", err)
	}
}

// isOwn reports whether st is one of this package's own statuses, not UCX's.
func isOwn(st int32) bool {
	switch st {
	case stRefused, stMemType, stTruncated, stBusy, stEnded:
		return true
	}
	return false
}
