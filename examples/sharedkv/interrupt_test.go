package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// commandEnv, set, makes this test binary the sharedkv command itself, with the arguments it
// holds (separated by spaces): TestMain runs main, as go run ./examples/sharedkv would.
const commandEnv = "SHAREDKV_COMMAND_ARGS"

// TestInterruptCleansUp: an interrupt (Ctrl-C, or SIGINT to this process alone) while the
// processes run stops every one of them and removes the socket's folder, and the command says
// so and exits 130. It died at once, leaving the folder, with the socket and its lock, in the
// temporary directory.
func TestInterruptCleansUp(t *testing.T) {
	stopped(t, "-ops 100000000", 130, func(cmd *exec.Cmd, out io.ReadCloser) {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, out) }() // the rest, so that no write blocks
	})
}

// TestBrokenPipeCleansUp: output into a pipe whose reader is gone (sharedkv | head) stops the
// command as an interrupt does, exit status 141. It died on the SIGPIPE, leaving the folder.
func TestBrokenPipeCleansUp(t *testing.T) {
	stopped(t, "", 141, func(_ *exec.Cmd, out io.ReadCloser) { // the next line written fails
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// stopped runs the command with args until its six processes run, calls stop, and checks that
// the command then exits with the status want, saying it was interrupted, having removed the
// socket's folder and stopped every process.
func stopped(t *testing.T, args string, want int, stop func(cmd *exec.Cmd, out io.ReadCloser)) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), commandEnv+"="+args)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A command that does not stop fails the test rather than hang it.
	defer time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() }).Stop()
	var dir string
	var pids []int
	r := bufio.NewReader(out) // by line, reading nothing past the sixth
	for len(pids) < 6 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("before six processes ran (pids %v): %v\n%s", pids, err, errb.String())
		}
		f := strings.Fields(line)
		for i, w := range f {
			if w == "pid" && i+1 < len(f) {
				pid, err := strconv.Atoi(f[i+1])
				if err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				pids = append(pids, pid)
			}
			if w == "socket" && i+1 < len(f) {
				dir = strings.TrimSuffix(f[i+1], "/kv.sock")
			}
		}
	}
	if dir == "" {
		t.Fatal("no socket in the output")
	}
	stop(cmd, out)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != want {
		t.Errorf("stopped: %v, want exit status %d\n%s", err, want, errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("stopped, stderr does not say interrupted:\n%s", errb.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stopped, the socket's folder %s: %v, want it removed", dir, err)
		_ = os.RemoveAll(dir)
	}
	for _, pid := range pids {
		for end := time.Now().Add(5 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Errorf("stopped, process %d still runs", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// running says whether process pid exists and is not a zombie (a process whose parent is
// gone is reaped by init, which a container may not do at once).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
