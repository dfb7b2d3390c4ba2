package pinned

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestUsageString(t *testing.T) {
	for _, c := range []struct {
		u    Usage
		want string
	}{
		{Usage{}, "0 live buffers, 0 B in use; 0 B committed, 0 B locked, 0 B reserved"},
		{Usage{Live: 1, InUse: 1000, Committed: 2 << 20, Locked: 2 << 20, Reserved: 64 << 20},
			"1 live buffer, 1000 B in use; 2 MiB committed, 2 MiB locked, 64 MiB reserved"},
		{Usage{Live: 3, InUse: 3 << 10, Committed: 2 << 20, Reserved: 64 << 20, Deferred: 1, DeferredBytes: 1 << 10, Precommitted: 4 << 20},
			"3 live buffers, 3 KiB in use; 2 MiB committed, 0 B locked, 64 MiB reserved; 1 buffer (1 KiB) wait for streams; 4 MiB precommitted"},
	} {
		if got := c.u.String(); got != c.want {
			t.Errorf("%+v.String() =\n%q, want\n%q", c.u, got, c.want)
		}
	}
}

// TestBackendText: Stats.Backend is the Backend type Options take, and it prints and encodes in
// JSON as its name, as the string it replaced did; a name reads back, an unknown one is refused.
func TestBackendText(t *testing.T) {
	js, err := json.Marshal(Stats{Backend: CUDAHost})
	if err != nil || !strings.Contains(string(js), `"Backend":"cuda-host"`) {
		t.Errorf("Stats encodes as %s, %v; want the backend's name", js, err)
	}
	for b := Locked; b <= Auto; b++ {
		var got Backend
		if err := got.UnmarshalText([]byte(b.String())); err != nil || got != b {
			t.Errorf("UnmarshalText(%q) = %v, %v", b, got, err)
		}
	}
	var got Backend
	if err := got.UnmarshalText([]byte("mlock")); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("UnmarshalText of an unknown name = %v; want ErrInvalidOptions", err)
	}
}
