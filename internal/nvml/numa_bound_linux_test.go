package nvml

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/numa"
)

// TestNUMABoundIsNumas: NUMANode bounds the node as internal/numa does, so that a node it
// returns is one numa.Bind takes.
func TestNUMABoundIsNumas(t *testing.T) {
	if maxNUMANodes != numa.MaxNodes {
		t.Errorf("nvml bounds nodes below %d, numa below %d", maxNUMANodes, numa.MaxNodes)
	}
}
