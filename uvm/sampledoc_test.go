package uvm

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestHitSampleDocumented: the docs a user reads say how many hits are timed, with the rate the
// tier uses: AcquireLatency.Hit's doc and the metrics package's HELP text.
func TestHitSampleDocumented(t *testing.T) {
	for file, want := range map[string]string{
		"latency.go":            fmt.Sprintf("one call in\n\t// %d", hitEvery),
		"../metrics/latency.go": fmt.Sprintf("1 call in %d is timed", hitEvery),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not say %q: hits are timed 1 in %d", file, want, hitEvery)
		}
	}
}
