package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/remote"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(decodeEnv); v != "" {
		var c config
		if _, err := fmt.Sscan(v, &c.blocks, &c.block, &c.requests); err != nil {
			os.Exit(2)
		}
		if err := decode(c, "127.0.0.1:0", os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if args, ok := os.LookupEnv(commandEnv); ok { // the command line, with these flags
		os.Args = append([]string{"kvtransfer"}, strings.Fields(args)...)
		flag.CommandLine = flag.NewFlagSet("kvtransfer", flag.ExitOnError) // without the test flags
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// commandEnv, set to a command line's flags, makes the test binary run main with them.
const commandEnv = "KVTRANSFER_TEST_ARGS"

// syncWriter is a strings.Builder two goroutines write (prefill, and the copy of decode's
// output).
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// runBoth runs both sides of the example with c, and returns what they printed; it skips
// where UCX cannot be loaded (fails instead under PINMALLOC_REQUIRE_UCX) and fails t when
// the run does.
func runBoth(t *testing.T, c config) string {
	t.Helper()
	if w, err := remote.New(remote.Options{}); errors.Is(err, remote.ErrNoUCX) {
		if os.Getenv("PINMALLOC_REQUIRE_UCX") != "" {
			t.Fatal(err)
		}
		t.Skipf("no UCX: %v", err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		_ = w.Close()
	}
	var out syncWriter
	if err := both(c, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.b.String())
	}
	return out.b.String()
}

// The example runs: every request's blocks arrive, checked byte for byte by the decode
// process, with one registration per region of each pool.
func TestKVTransfer(t *testing.T) {
	s := runBoth(t, config{blocks: 16, block: 16 << 10, requests: 4})
	t.Log(s)
	for _, want := range []string{"request  3: 16 blocks of 16 KiB", "every byte checked", "UCX registrations: 1 for 64 blocks sent (the pool's 1 region,"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestKVTransferNoUCX: without UCX, -role both says so once, as the error remote.ErrNoUCX,
// without starting the decode process. It started it, which failed alike (on stderr), and
// then said "decode process: EOF" and the child's exit status.
func TestKVTransferNoUCX(t *testing.T) {
	if w, err := remote.New(remote.Options{}); err == nil {
		_ = w.Close()
		t.Skip("UCX is installed")
	}
	var out syncWriter
	err := both(config{blocks: 4, block: 4 << 10, requests: 1}, &out)
	if !errors.Is(err, remote.ErrNoUCX) || strings.Contains(err.Error(), "decode") {
		t.Errorf("both without UCX: %v; want remote.ErrNoUCX, from this process\n%s", err, out.b.String())
	}
}
