package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// TestSmallBlockSize: a block under a KiB, or not a whole number of KiB, is said in bytes. A
// block of 512 B read "blocks of 0 KiB", one of 1600 B "blocks of 1 KiB".
func TestSmallBlockSize(t *testing.T) {
	if dev, _ := cudatest.Device(t); dev == nil {
		return
	}
	var out bytes.Buffer
	args := []string{"-budget", "1048576", "-oversub", "1", "-block-tokens", "1", "-token-bytes", "512",
		"-min-len", "8", "-max-len", "16", "-prompt", "4", "-batch", "2", "-steps", "5"}
	if err := run(args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "blocks of 512 B (1 tokens × 512 B)") {
		t.Errorf("the output does not say blocks of 512 B:\n%s", s)
	}
	for n, want := range map[int]string{512: "512 B", 1600: "1600 B", 16 << 10: "16 KiB", 2 << 20: "2 MiB", 3<<20 + 1<<10: "3073 KiB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}
