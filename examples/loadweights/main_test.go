package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun loads a file whose size is not a multiple of the chunk (the last read ends short,
// which O_DIRECT allows only at the end of the file) and checks the example's own verification
// passed. With a CUDA driver the chunks also go to the GPU and are read back.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-size", "10000000", "-chunk", "1048576", "-workers", "3", "-inflight", "2"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "checksums match") || !strings.Contains(out.String(), "in 10 chunks") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	t.Log(out.String())
}

func TestBadFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-chunk", "1000"}, &out); err == nil {
		t.Fatal("a chunk that is not a multiple of 4096 was accepted")
	}
}
