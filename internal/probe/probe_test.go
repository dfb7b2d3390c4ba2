package probe

import (
	"strings"
	"testing"
	"time"
)

// TestPause checks that Pause sleeps at one call in every (DefaultEvery unless the
// environment says otherwise), for at least the pause, in the probe build, and does nothing
// (counts no call) without it.
func TestPause(t *testing.T) {
	every, pause := config()
	n := 3 * max(every, 1)
	before := calls.Load()
	start := time.Now()
	for range n {
		Pause()
	}
	took := time.Since(start)
	counted := calls.Load() - before
	switch {
	case !Enabled && counted != 0:
		t.Fatalf("Pause counted %d calls without the tag pinmalloc_probe", counted)
	case Enabled && every > 0 && counted != n:
		t.Fatalf("Pause counted %d calls, want %d", counted, n)
	case Enabled && every > 0 && took < 3*pause:
		t.Fatalf("%d calls of Pause took %v, want at least 3 pauses of %v", n, took, pause)
	}
}

// TestSettings checks that the environment sets Pause's count and duration, and that a
// malformed value panics naming its variable.
func TestSettings(t *testing.T) {
	t.Setenv(EnvEvery, "7")
	t.Setenv(EnvPause, "25ms")
	if every, pause := settings(); every != 7 || pause != 25*time.Millisecond {
		t.Fatalf("settings() = %d, %v; want 7, 25ms", every, pause)
	}
	for _, bad := range [][2]string{{EnvEvery, "-1"}, {EnvEvery, "often"}, {EnvPause, "5"}, {EnvPause, "-1ms"}} {
		t.Run(bad[0]+"="+bad[1], func(t *testing.T) {
			t.Setenv(EnvEvery, "")
			t.Setenv(EnvPause, "")
			t.Setenv(bad[0], bad[1])
			defer func() {
				if r, _ := recover().(string); r == "" || !strings.Contains(r, bad[0]) {
					t.Fatalf("settings() with %s=%q panicked with %q, want a message naming it", bad[0], bad[1], r)
				}
			}()
			settings()
		})
	}
}
