package metrics

import (
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/kindtest"
)

// TestKinds: the package's sentinels match their kind of package pinmalloc and no other, read
// "metrics: ", stay distinct from every other package's sentinels, and are all listed here (the
// core module's TestKinds checks the core's).
func TestKinds(t *testing.T) {
	kindtest.CheckPackage(t, ".", []kindtest.Sentinel{
		{Name: "metrics.ErrInvalidName", Err: ErrInvalidName, Kind: pinmalloc.ErrInvalid, Prefix: "metrics: "},
		{Name: "metrics.ErrNilSource", Err: ErrNilSource, Kind: pinmalloc.ErrInvalid, Prefix: "metrics: "},
	})
}
