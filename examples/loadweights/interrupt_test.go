package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commandEnv, set, makes this test binary the loadweights command itself, with the arguments
// it holds (separated by spaces): TestMain runs main, as go run ./examples/loadweights would.
const commandEnv = "LOADWEIGHTS_COMMAND_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(commandEnv); ok {
		os.Args = append([]string{"loadweights"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestInterruptRemovesTempFile: an interrupt (Ctrl-C) while the temporary file is written
// removes it, and the command says so and exits 130. The file (256 MiB by default, in memory
// where /tmp is a tmpfs) stayed behind.
func TestInterruptRemovesTempFile(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(self)
	// 2 GiB: interrupted long before it is written, and bounded if the interrupt fails
	cmd.Env = append(os.Environ(), commandEnv+"=-size 2147483648", "TMPDIR="+dir)
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A command that does not stop fails the test rather than hang it.
	defer time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() }).Stop()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(dir, "pinmalloc-weights-*"))
		if len(m) == 1 {
			if fi, err := os.Stat(m[0]); err == nil && fi.Size() > 0 { // being written
				break
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no temporary file being written in 10 s:\n%s", errb.String())
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Errorf("after SIGINT: %v, want exit status 130\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("after SIGINT, the output does not say interrupted:\n%s", errb.String())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Errorf("after SIGINT, left behind: %v", m)
	}
}
