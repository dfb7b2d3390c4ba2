package arena

import (
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/probe"
)

// TestDefaultPurgeDelay: a zero PurgeDelay takes DefaultPurgeDelay, 10 ms, or 1 µs in the
// probe build (-tags pinmalloc_probe); a delay set explicitly, or a negative one, is kept in
// both.
func TestDefaultPurgeDelay(t *testing.T) {
	want := 10 * time.Millisecond
	if probe.Enabled {
		want = time.Microsecond
	}
	if DefaultPurgeDelay != want {
		t.Fatalf("DefaultPurgeDelay = %v, want %v (probe build: %v)", DefaultPurgeDelay, want, probe.Enabled)
	}
	for _, c := range []struct{ set, want time.Duration }{{0, want}, {20 * time.Millisecond, 20 * time.Millisecond}, {-1, -1}} {
		o, _, err := Options{Provider: PageableHost(HostOptions{}), Capacity: 64 << 20, PurgeDelay: c.set}.resolve()
		if err != nil {
			t.Fatal(err)
		}
		if o.PurgeDelay != c.want {
			t.Errorf("PurgeDelay %v resolved to %v, want %v", c.set, o.PurgeDelay, c.want)
		}
	}
}
