package shared

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const memlockChildEnv = "PINMALLOC_SHARED_MEMLOCK_CHILD"

// TestMemlockFallback runs the test binary again with RLIMIT_MEMLOCK at 4 MiB (as nobody when
// the test runs as root, whose CAP_IPC_LOCK ignores the limit). There a pool of 8 MiB fails
// with ErrMemlock, and with FallbackPageable serves pageable and says so in Stats; an attach
// whose lock is refused fails the same way, or falls back.
func TestMemlockFallback(t *testing.T) {
	if os.Getenv(memlockChildEnv) == "1" {
		memlockChild(t)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary: %v", err)
	}
	cmd := exec.Command(self, "-test.run=^TestMemlockFallback$", "-test.v")
	cmd.Env = append(os.Environ(), memlockChildEnv+"=1")
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "pinmalloc-shared-memlock")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "shared.test")
		if err := copyExe(self, bin); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil { // nobody makes its socket here
			t.Fatal(err)
		}
		cmd.Path, cmd.Args[0], cmd.Dir = bin, bin, dir
		cmd.Env = append(cmd.Env, "TMPDIR="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "operation not permitted") {
		t.Skipf("cannot start an unprivileged child here: %v\n%s", err, out)
	}
	if err != nil || !strings.Contains(string(out), "MEMLOCK-OK") {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
}

func memlockChild(t *testing.T) {
	lim := unix.Rlimit{Cur: 4 << 20, Max: 4 << 20}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	if _, err := Serve(path, Options{Size: 8 << 20}); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Serve of 8 MiB under a 4 MiB limit: %v", err)
	}
	w, err := Serve(path, Options{Size: 8 << 20, FallbackPageable: true})
	if err != nil {
		t.Fatalf("Serve with FallbackPageable: %v", err)
	}
	defer w.Close()
	if st := w.Stats(); len(st.PageableRegions) != 1 || !strings.Contains(st.PageableRegions[0], "memlock") {
		t.Fatalf("PageableRegions %q, want the one region and why", st.PageableRegions)
	}
	if _, err := Attach(path, AttachOptions{}); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Attach of 8 MiB under a 4 MiB limit: %v", err)
	}
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatalf("Attach with FallbackPageable: %v", err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if len(p.Stats().PageableRegions) != 1 {
		t.Fatalf("the attached process does not report its pageable region")
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("MEMLOCK-OK")
}

func copyExe(from, to string) error {
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
