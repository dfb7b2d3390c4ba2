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
// 2, naming it and its range, before any file is written. -chunk 9223372036854771712
// panicked (makeslice: the chunk count overflowed), -inflight 1000000000 ran out of memory
// making the queue, -workers 100000000 ran past a minute starting goroutines, -size -1 loaded
// an empty file, and -chunk 1000 said "must be a positive multiple of 4096" with exit status 1.
func TestFlagsOutOfRange(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"-chunk 9223372036854771712", "-chunk 9223372036854771712: want a multiple of 4096 from 4096 to 1073741824"},
		{"-chunk 1000", "-chunk 1000: want a multiple of 4096"},
		{"-chunk 0", "-chunk 0: want a multiple of 4096"},
		{"-inflight 1000000000", "-inflight 1000000000: want 1 to 1024"},
		{"-inflight 0", "-inflight 0: want 1 to 1024"},
		{"-workers 100000000", "-workers 100000000: want 1 to 1024"},
		{"-workers -1", "-workers -1: want 1 to 1024"},
		{"-size -1", "-size -1: want 0 or more"},
	} {
		// A refused flag ends the process at once; one taken runs, and is stopped here.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), commandEnv+"="+c.args+" -size 100000")
		if strings.HasPrefix(c.args, "-size") {
			cmd.Env = append(os.Environ(), commandEnv+"="+c.args)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			err = fmt.Errorf("still running after 20s: %w", err)
		}
		cancel()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "loadweights: "+c.want) ||
			strings.Contains(stderr.String(), "panic") || stdout.Len() != 0 {
			t.Errorf("loadweights %s: %v\nstdout:\n%.500s\nstderr:\n%.500s\nwant it refused at once with exit status 2, saying %q",
				c.args, err, stdout.String(), stderr.String(), c.want)
		}
	}
}
