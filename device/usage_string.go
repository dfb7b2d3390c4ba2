package device

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// String formats the figures for people on one line, sizes in binary units: "4 live blocks, 1
// MiB in use; 2 MiB committed, 64 MiB reserved", as pinned.Usage's String does for a pool.
func (u Usage) String() string {
	return fmt.Sprintf("%s, %s in use; %s committed, %s reserved",
		units.Count(u.Live, "live block"), units.Bytes(u.InUse), units.Bytes(u.Committed), units.Bytes(u.Reserved))
}
