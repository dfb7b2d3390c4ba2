package pinned

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// String formats the figures for people on one line, sizes in binary units: "4 live buffers, 1
// MiB in use; 2 MiB committed, 2 MiB locked, 64 MiB reserved", with the deferred buffers and
// the precommit when there are any.
func (u Usage) String() string {
	s := fmt.Sprintf("%s, %s in use; %s committed, %s locked, %s reserved",
		units.Count(u.Live, "live buffer"), units.Bytes(u.InUse), units.Bytes(u.Committed), units.Bytes(u.Locked), units.Bytes(u.Reserved))
	if u.Deferred > 0 {
		s += fmt.Sprintf("; %s (%s) wait for streams", units.Count(u.Deferred, "buffer"), units.Bytes(u.DeferredBytes))
	}
	if u.Precommitted > 0 {
		s += fmt.Sprintf("; %s precommitted", units.Bytes(u.Precommitted))
	}
	return s
}
