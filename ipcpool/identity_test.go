package ipcpool

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// Attach checks who serves the socket (SO_PEERCRED) before it sends or maps anything: a server
// of a user AttachOptions.ServerUIDs does not list (by default: its own user and root) is
// refused with ErrRefused. As root, the test also serves a pool as nobody from a
// world-writable directory, open to root: root's Attach refuses it (a root process used to
// attach, and nobody read root's buffer), and accepts it only when told to.
func TestServerIdentity(t *testing.T) {
	w, path := serveTest(t, Options{})
	_, err := Attach(context.Background(), path, AttachOptions{ServerUIDs: []int{os.Getuid() + 12345}})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Attach to a server of a user not listed: %v", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("%d attached after the server was refused", n)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the server run as nobody is root's case only")
		return
	}
	dir, err := os.MkdirTemp("", "pinmalloc-ipcpool-identity")
	must(t, "MkdirTemp", err)
	defer os.RemoveAll(dir)
	must(t, "chmod", os.Chmod(dir, 0o777))
	bin := filepath.Join(dir, "ipcpool.test")
	must(t, "copy", memlocktest.CopyExe(os.Args[0], bin))
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	sock := filepath.Join(dir, "pool.sock")
	startProc(t, cmd, ownerEnv(sock, 4<<20, ownerOpenEnv+"=1", "TMPDIR="+dir))
	if _, err := Attach(context.Background(), sock, AttachOptions{FallbackPageable: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("root attaching to a pool nobody serves: %v, want ErrRefused", err)
	}
	p, err := Attach(context.Background(), sock, AttachOptions{FallbackPageable: true, ServerUIDs: []int{65534}})
	must(t, "Attach to nobody's pool when told to", err)
	must(t, "Close", p.Close())
}
