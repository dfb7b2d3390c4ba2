package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFlagsOutOfRange: a flag the example cannot run with is refused at once with exit status
// 2, naming it and its range, before any process starts. -block 1099511627776 or -blocks
// 100000000 ran past a minute filling terabytes of pageable memory, -blocks 4294967297 -block
// 4294967296 panicked (the product overflowed), and 0 was refused without saying the range.
func TestFlagsOutOfRange(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"-blocks 0", "-blocks 0: want 1 to 4096"},
		{"-blocks -1", "-blocks -1: want 1 to 4096"},
		{"-blocks 100000000", "-blocks 100000000: want 1 to 4096"},
		{"-block 0", "-block 0: want 1 to 16777216 bytes"},
		{"-block 1099511627776", "-block 1099511627776: want 1 to 16777216 bytes"},
		{"-blocks 4294967297 -block 4294967296", "-blocks 4294967297: want 1 to 4096"},
		{"-blocks 4096 -block 16777216", "-blocks 4096 × -block 16777216 = 68719476736 bytes a request: want at most 268435456 (256 MiB"},
		{"-blocks 4096 -block 65537", "-blocks 4096 × -block 65537 = 268439552 bytes a request: want at most 268435456"},
		{"-requests 0", "-requests 0: want 1 or more"},
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
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "kvtransfer: "+c.want) ||
			strings.Contains(stderr.String(), "panic") || stdout.Len() != 0 {
			t.Errorf("kvtransfer %s: %v\nstdout:\n%s\nstderr:\n%s\nwant it refused at once with exit status 2, saying %q",
				c.args, err, stdout.String(), stderr.String(), c.want)
		}
	}
}
