package arena

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHostReserveUnwindRefused: a host provider's Reserve that fails after its mmap (the NUMA
// bind, the populate) and whose munmap of the region is then refused says, beside its own
// failure, that the region could not be given back: it matches the failure's sentinel and
// cause, and the give-back refusal's (ErrCommit, "arena: cannot give memory back", the
// munmap's error). Before, the refused munmap was dropped in silence: the error told only of
// the failure and the region stayed mapped unknown to the caller.
func TestHostReserveUnwindRefused(t *testing.T) {
	const size = 64 << 10
	for _, c := range []struct {
		name  string
		h     *HostProvider
		cause error
		sent  error
	}{
		{"bind refused", PageableHost(HostOptions{Node: NUMANode(999)}), unix.EINVAL, ErrReserve},
		{"populate refused", LockedHost(HostOptions{Populate: true}), unix.EFAULT, ErrCommit},
	} {
		h := c.h
		h.mlockFn = func([]byte) error { return unix.EFAULT }
		var n uintptr
		h.munmapFn = func(_, s uintptr) error {
			n = s
			return unix.EBUSY
		}
		r, err := h.Reserve(size, 1)
		if r != nil {
			t.Fatalf("%s: Reserve returned a region", c.name)
		}
		if n != size {
			t.Fatalf("%s: munmap of %d bytes tried, want %d", c.name, n, size)
		}
		if !errors.Is(err, c.sent) || !errors.Is(err, c.cause) {
			t.Errorf("%s: %v; want %v and %v", c.name, err, c.sent, c.cause)
		}
		if !errors.Is(err, errGiveBack) || !errors.Is(err, ErrCommit) || !errors.Is(err, unix.EBUSY) {
			t.Errorf("%s: %v; want the give-back refusal, ErrCommit and %v", c.name, err,
				unix.EBUSY)
		}
		if err != nil && strings.Count(err.Error(), "arena: cannot give memory back") != 1 {
			t.Errorf("%s: %q tells the refusal other than once", c.name, err)
		}
		// Without a refusal the error tells of no give-back (the region kept is unmapped).
		h.munmapFn = nil
		if _, err := h.Reserve(size, 1); err == nil ||
			strings.Contains(err.Error(), "give memory back") {
			t.Errorf("%s, munmap done: %v", c.name, err)
		}
	}
}
