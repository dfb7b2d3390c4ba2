package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestFlagsOutOfRange: a flag the demonstration cannot run with is refused at once, naming it
// and its range, before any process starts. -keys 0 panicked in rand.IntN with a stack dump,
// and -value 1 or 1048576 started the six processes and failed midway ("pool full").
func TestFlagsOutOfRange(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"-keys 0", "-keys 0: want 1 to 512 with -value 4096"},
		{"-keys -1", "-keys -1: want 1 to"},
		{"-keys 600", "-keys 600: want 1 to 512"},
		{"-value 1", "-value 1: want 2048 to 65536"},
		{"-value 1048576", "-value 1048576: want 2048 to 65536"},
		{"-value 65536 -keys 33", "-keys 33: want 1 to 32 with -value 65536"},
		{"-ops -1", "-ops -1: want 0 or more"},
	} {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), commandEnv+"="+c.args)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil || !strings.Contains(stderr.String(), "sharedkv: "+c.want) || strings.Contains(stderr.String(), "panic") ||
			stdout.Len() != 0 {
			t.Errorf("sharedkv %s: %v\nstdout:\n%s\nstderr:\n%s\nwant it refused at once, saying %q", c.args, err, stdout.String(), stderr.String(), c.want)
		}
	}
}

// TestFewOps: with -ops 0 (or few enough that every value went with the killed worker or
// worker 0's letting go) the stale handle is still shown: a value is written for it. It failed
// with "no value left to replace".
func TestFewOps(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 4096, 0, 32, 1); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "old version's handle is refused") || !strings.Contains(s, "all 4 grants free") {
		t.Errorf("output lacks the stale handle or the empty pool:\n%s", s)
	}
}
