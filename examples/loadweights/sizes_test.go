package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSmallFileSizes: a file under a MiB (-file pointed at a small one) is said in KiB or
// bytes, and so is its rate. It read "loaded 0 MiB in 1 chunks ...: 0 MiB/s ... for a 0 MiB
// file".
func TestSmallFileSizes(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-size", "100000"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"loaded 97.7 KiB in 1 chunks", "for a 97.7 KiB file"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, " 0 MiB") || strings.Contains(s, "0.0 MiB") {
		t.Errorf("output says 0 MiB:\n%s", s)
	}
	for n, want := range map[int64]string{100: "100 B", 4096: "4 KiB", 100000: "97.7 KiB", 256 << 20: "256 MiB", 10000000: "9.5 MiB"} {
		if got := amount(n); got != want {
			t.Errorf("amount(%d) = %q, want %q", n, got, want)
		}
	}
}
