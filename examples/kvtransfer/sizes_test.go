package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestTinyBlockSizes: blocks under a KiB (-block 1) are said in bytes, and so are the total
// and the rate. They read "4 blocks of 0 KiB", "= 0.0 MiB" and "0 MB/s".
func TestTinyBlockSizes(t *testing.T) {
	s := runBoth(t, config{blocks: 4, block: 1, requests: 2})
	for _, want := range []string{"request  1: 4 blocks of 1 B in", "2 requests x 4 blocks x 1 B = 8 B in"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`of transfers: [1-9][0-9.]* (B|KiB|MiB)/s, every byte checked`).MatchString(s) {
		t.Errorf("output lacks the rate in B, KiB or MiB a second:\n%s", s)
	}
	for _, bad := range []string{" 0 KiB", "0.0 MiB", " 0 MB/s"} {
		if strings.Contains(s, bad) {
			t.Errorf("output says %q:\n%s", bad, s)
		}
	}
	for n, want := range map[int64]string{1: "1 B", 1000: "1000 B", 1536: "1.5 KiB", 64 << 10: "64 KiB", 16 << 20: "16 MiB", 10000000: "9.5 MiB"} {
		if got := amount(n); got != want {
			t.Errorf("amount(%d) = %q, want %q", n, got, want)
		}
	}
}
