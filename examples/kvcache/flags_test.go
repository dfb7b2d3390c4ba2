package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// commandEnv, set to a command line's flags, makes the test binary run main with them.
const commandEnv = "KVCACHE_TEST_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(commandEnv); ok {
		os.Args = append([]string{"kvcache"}, strings.Fields(args)...)
		flag.CommandLine = flag.NewFlagSet("kvcache", flag.ExitOnError) // without the test flags
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFlagsOutOfRange: a flag the example cannot run with is refused at once with exit status
// 2, naming it and its range, before any driver is loaded. -token-bytes 1 or 3 put 3.5 million
// sequence slots in the cache and ran past a minute, as did -zipf +Inf (math/rand's Zipf
// never draws), -batch 1000000000 (a slice of 2 billion slots) and -budget 1099511627776;
// -token-bytes 4611686018427387904 overflowed a block's size to 0 ("heap: invalid size"), and
// -max-len 9223372036854775807 the longest sequence's, which then passed the check that it
// fits half the budget. Each exited 1, or not at all.
func TestFlagsOutOfRange(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"-token-bytes 1", "-token-bytes 1: want 256 to 16777216 with -block-tokens 16 and a 128 MiB cache (-oversub × -budget: at most 32768 blocks)"},
		{"-token-bytes 3", "-token-bytes 3: want 256 to 16777216"},
		{"-token-bytes 0", "-token-bytes 0: want 256 to"},
		{"-token-bytes 4611686018427387904", "-token-bytes 4611686018427387904: want 256 to 16777216"},
		{"-block-tokens 1 -token-bytes 4095", "-token-bytes 4095: want 4096 to 16777216 with -block-tokens 1"},
		{"-block-tokens 0", "-block-tokens 0: want 1 to 1024"},
		{"-block-tokens 4611686018427387904", "-block-tokens 4611686018427387904: want 1 to 1024"},
		{"-zipf +Inf", "-zipf +Inf: want an exponent above 1, at most 100"},
		{"-zipf 1", "-zipf 1: want an exponent above 1"},
		{"-batch 1000000000", "-batch 1000000000: want 1 to 1024"},
		{"-batch 0", "-batch 0: want 1 to 1024"},
		{"-steps 0", "-steps 0: want 1 or more"},
		{"-budget 1099511627776", "-budget 1099511627776: want 1048576 to 68719476736 bytes"},
		{"-budget 9223372036854775807", "-budget 9223372036854775807: want 1048576 to"},
		{"-budget 1000", "-budget 1000: want 1048576 to"},
		{"-max-len 9223372036854775807", "-max-len 9223372036854775807: want at most 1048576 tokens"},
		{"-oversub 9", "-oversub 9: want 1 to 8"},
	} {
		// A refused flag ends the process at once; one taken runs, and is stopped here.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), commandEnv+"="+c.args)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			err = fmt.Errorf("still running after 20s: %w", err)
		}
		cancel()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "kvcache: "+c.want) ||
			strings.Contains(stderr.String(), "panic") || strings.Contains(stderr.String(), "driver") || stdout.Len() != 0 {
			t.Errorf("kvcache %s: %v\nstdout:\n%.500s\nstderr:\n%.500s\nwant it refused at once with exit status 2, saying %q",
				c.args, err, stdout.String(), stderr.String(), c.want)
		}
	}
}
