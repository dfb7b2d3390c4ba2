package main

import (
	"strings"
	"testing"
)

// TestMemlockLineSaysSide: where the memlock limit cannot hold a pool's blocks (16 MiB here;
// an ordinary user has 8 MiB), each process says so once, labelled with its side and in MiB.
// Prefill's line had no label, beside decode's "decode: ...", and both said "16777216 bytes".
// It skips where this process can lock 16 MiB (root, or a higher limit): CI runs it as an
// ordinary user under 8 MiB (.ci/unprivileged).
func TestMemlockLineSaysSide(t *testing.T) {
	s := runBoth(t, config{blocks: 256, block: 64 << 10, requests: 1})
	if !strings.Contains(s, "memlock limit below") {
		t.Skipf("this process locks 16 MiB (root, or a memlock limit above it): no fallback to say\n%s", s)
	}
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "memlock") {
			lines = append(lines, l)
		}
	}
	for _, side := range []string{"prefill", "decode"} {
		want := side + ": memlock limit below 16 MiB: pageable memory instead"
		if n := strings.Count(s, want+"\n"); n != 1 {
			t.Errorf("%q said %d times, want once", want, n)
		}
	}
	if len(lines) != 2 {
		t.Errorf("%d lines about memlock, want one per side:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}
