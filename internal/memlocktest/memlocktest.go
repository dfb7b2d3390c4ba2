// Package memlocktest runs a test again in a child process under a low RLIMIT_MEMLOCK, as an
// unprivileged user when the test runs as root (whose CAP_IPC_LOCK ignores the limit), so that
// a package's memlock paths run for real. Tests only.
package memlocktest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Limit is the RLIMIT_MEMLOCK the child runs under by default: 4 MiB (RunAt picks another).
const Limit = 4 << 20

const (
	childEnv = "PINMALLOC_MEMLOCK_CHILD"
	okLine   = "MEMLOCK-OK"
)

// Child reports whether this process is the child Run (or RunAt) started. There it lowers
// RLIMIT_MEMLOCK to Limit (or RunAt's limit) first, failing t when it cannot, and says, at the
// end of t, that the child passed.
func Child(t *testing.T) bool {
	v := os.Getenv(childEnv)
	if v == "" {
		return false
	}
	limit := uint64(Limit)
	if v != "1" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", childEnv, v, err)
		}
		limit = n
	}
	lim := unix.Rlimit{Cur: limit, Max: limit}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			fmt.Println(okLine)
		}
	})
	return true
}

// Run runs the test named test of this test binary again in a child process, where Child
// returns true; as nobody when the test runs as root, from a copy of the binary in a
// temporary directory anyone may write (its TMPDIR). It fails t unless the child passed,
// skips it where an unprivileged child cannot start, and returns the child's output.
func Run(t *testing.T, test string) []byte {
	t.Helper()
	return run(t, test, "1")
}

// RunAt is Run with the child's RLIMIT_MEMLOCK at limit bytes: Debian's default for an
// ordinary user is 8 MiB, say.
func RunAt(t *testing.T, test string, limit uint64) []byte {
	t.Helper()
	return run(t, test, strconv.FormatUint(limit, 10))
}

func run(t *testing.T, test, limit string) []byte {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary: %v", err)
	}
	cmd := exec.Command(self, "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+limit)
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "pinmalloc-memlock")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, filepath.Base(self))
		if err := CopyExe(self, bin); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil { // nobody makes its files here
			t.Fatal(err)
		}
		cmd.Path, cmd.Args[0], cmd.Dir = bin, bin, dir
		cmd.Env = append(cmd.Env, "TMPDIR="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if cannotStart(out, err) {
		t.Skipf("cannot start an unprivileged child here: %v\n%s", err, out)
	}
	if err != nil || !strings.Contains(string(out), okLine) {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	return out
}

// cannotStart reports whether the child's run failed because the kernel refused to start it
// as nobody (fork/exec answers EPERM, or EACCES where nobody may not reach the binary). A child
// that ran and failed is no such case, whatever its output out says ("operation not
// permitted" is also an mlock's EPERM and CUDA_ERROR_NOT_PERMITTED): that is a failure.
func cannotStart(out []byte, err error) bool {
	var exit *exec.ExitError
	return len(out) == 0 && err != nil && !errors.As(err, &exit) &&
		(errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES))
}

// CopyExe copies the executable from to a new file to, executable by anyone (for a child run
// as another user).
func CopyExe(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Locked returns the bytes this process has locked now (VmLck of /proc/self/status), skipping
// t where the kernel does not say.
func Locked(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	n, ok, err := vmLck(b)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("no VmLck in /proc/self/status")
	}
	return n
}

// vmLck returns the bytes of the VmLck line of status (/proc/PID/status); ok is false where
// it has none, err says a line it cannot read or whose kB are more bytes than a uint64 holds
// (past 2^54 kB: no kernel's, a fake's or a broken one's, not to be taken wrapped).
func vmLck(status []byte) (n uint64, ok bool, err error) {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmLck:"); ok {
			figure := strings.TrimSuffix(strings.TrimSpace(rest), "kB")
			kb, err := strconv.ParseUint(strings.TrimSpace(figure), 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("VmLck: %q: %w", line, err)
			}
			if kb > math.MaxUint64>>10 {
				return 0, false, fmt.Errorf("VmLck: %q: more than 2^64 bytes", line)
			}
			return kb << 10, true, nil
		}
	}
	return 0, false, nil
}

// FailPartway returns a stand-in for mlock(2) that fails part-way, as a kernel's mlock can: it
// locks the first half of the range for real, then returns ENOMEM, leaving that half locked
// (skipping t where even the half may not be locked).
func FailPartway(t testing.TB) func(b []byte) error {
	return func(b []byte) error {
		if err := unix.Mlock(b[:len(b)/2]); err != nil {
			t.Skipf("mlock of %d bytes: %v (RLIMIT_MEMLOCK too low to test)", len(b)/2, err)
		}
		return unix.ENOMEM
	}
}

// Anonymous maps size bytes of private anonymous memory for a test, unmapped at its end.
func Anonymous(t testing.TB, size int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}
