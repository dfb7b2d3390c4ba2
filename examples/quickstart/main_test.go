package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// commandEnv, set, makes this test binary the quickstart command itself, with the arguments
// it holds (separated by spaces): TestMain runs main, as go run ./examples/quickstart would.
const commandEnv = "QUICKSTART_COMMAND_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(commandEnv); ok {
		os.Args = append([]string{"quickstart"}, strings.Fields(args)...)
		flag.CommandLine = flag.NewFlagSet("quickstart", flag.ExitOnError) // without the test flags
		flag.CommandLine.Usage = func() { flag.Usage() }                   // as the original's is
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command runs the quickstart with args in a child process and returns its output.
func command(t *testing.T, args string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), commandEnv+"="+args)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestQuickstart runs the README's first command as a newcomer would: it exits 0 and prints
// the pool's figures, its three rounds of churn and the mistakes it refuses.
func TestQuickstart(t *testing.T) {
	if raceEnabled {
		// 3,000,000 Allocs and Frees, 12 s under the race detector: pinned's own tests race the
		// same pool; the go test without -race and CI's go run as nobody run this one.
		t.Skip("the pool's churn is pinned's tests' to race; this runs the command, without -race")
	}
	out, err := command(t, "")
	if err != nil || !strings.Contains(out, "buffers live") || strings.Count(out, "round ") != 3 ||
		!strings.Contains(out, "double free: pinned: double free") {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
}

// TestUsage: -h prints the usage and exits 0.
func TestUsage(t *testing.T) {
	if out, err := command(t, "-h"); err != nil || !strings.Contains(out, "usage: quickstart") {
		t.Fatalf("quickstart -h: %v\n%s", err, out)
	}
}
