package debugpage

import (
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/kindtest"
)

// TestKinds: the package's sentinels match their kind of package pinmalloc and no other, read
// "debugpage: ", stay distinct from each other and from every other package's sentinels, and
// are all listed here (the core module's TestKinds checks the core's).
func TestKinds(t *testing.T) {
	kindtest.CheckPackage(t, ".", []kindtest.Sentinel{
		{Name: "debugpage.ErrSnapshot", Err: ErrSnapshot, Kind: pinmalloc.ErrInvalid, Prefix: "debugpage: "},
		{Name: "debugpage.ErrFrozen", Err: ErrFrozen, Kind: pinmalloc.ErrInvalid, Prefix: "debugpage: "},
		{Name: "debugpage.ErrInvalidName", Err: ErrInvalidName, Kind: pinmalloc.ErrInvalid, Prefix: "debugpage: "},
		{Name: "debugpage.ErrNilSource", Err: ErrNilSource, Kind: pinmalloc.ErrInvalid, Prefix: "debugpage: "},
	})
}
