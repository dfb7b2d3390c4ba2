package main

import (
	"bufio"
	"errors"
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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), commandEnv+"=-ops 100000000")
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
	var dir string
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 6 && sc.Scan() { // the owner's, the keeper's and four workers' lines
		f := strings.Fields(sc.Text())
		for i, w := range f {
			if w == "pid" && i+1 < len(f) {
				pid, err := strconv.Atoi(f[i+1])
				if err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				pids = append(pids, pid)
			}
			if w == "socket" && i+1 < len(f) {
				dir = strings.TrimSuffix(f[i+1], "/kv.sock")
			}
		}
	}
	if len(pids) < 6 || dir == "" {
		t.Fatalf("no socket or not six processes in the output (pids %v, socket folder %q)", pids, dir)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() { // the rest of the output, so that a write never blocks the command
		for sc.Scan() {
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Errorf("after SIGINT: %v, want exit status 130\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("after SIGINT, stderr does not say interrupted:\n%s", errb.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after SIGINT, the socket's folder %s: %v, want it removed", dir, err)
	}
	for _, pid := range pids {
		for end := time.Now().Add(5 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Errorf("after SIGINT, process %d still runs", pid)
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
