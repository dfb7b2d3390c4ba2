package ipcpool

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Owners starting at once on a path with a stale socket file (its owner was killed): exactly
// one serves, at the path, and each other fails with ErrServed. In the paused rounds the
// first owner has found the socket stale and waits just before replacing it while the second
// starts, and serves before the second goes on (before the path's lock, the second, which had
// found the same socket stale, removed the first's socket and served on its own: two owners,
// one of them unreachable). The other rounds start the owners together, unpaused. Every
// round's owner is killed with SIGKILL, leaving its socket and its lock file for the next.
func TestOwnersStartingAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "listen", err)
	ln.SetUnlinkOnClose(false)
	ln.Close() // a socket file nobody serves
	paused, unpaused := 2, 2
	if long() {
		paused, unpaused = 10, 40
	}
	for round := range paused + unpaused {
		n, env := 2, []string{ownerPauseEnv + "=1"}
		if round >= paused {
			n, env = 3, nil
		}
		kids := make([]*child, n)
		lines := make([]chan string, n)
		for i := range kids {
			kids[i] = spawn(t, exec.Command(os.Args[0], "-test.run=^$"), ownerEnv(path, 4<<20, env...))
			lines[i] = make(chan string, 4)
			go func(c *child, out chan string) {
				for c.out.Scan() {
					out <- c.out.Text()
				}
				close(out)
			}(kids[i], lines[i])
		}
		next := func(i int) string {
			select {
			case l := <-lines[i]:
				return l
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: owner %d said nothing", round, i)
				return ""
			}
		}
		var first []string
		if round < paused {
			// Both start; whichever pauses first is let go once the other has answered
			// (paused too, or refused).
			for i := range kids {
				first = append(first, next(i))
			}
			if !strings.Contains(strings.Join(first, ","), "PAUSED") {
				t.Fatalf("round %d: no owner found the socket stale: %q", round, first)
			}
			for i, l := range first {
				if l == "PAUSED" {
					_, _ = kids[i].in.Write([]byte("\n"))
					first[i] = next(i)
					break
				}
			}
			for i, l := range first {
				if l == "PAUSED" {
					_, _ = kids[i].in.Write([]byte("\n"))
					first[i] = next(i)
				}
			}
		} else {
			for i := range kids {
				first = append(first, next(i))
			}
		}
		serving := -1
		for i, l := range first {
			switch {
			case strings.HasPrefix(l, "READY"):
				if serving >= 0 {
					t.Fatalf("round %d: two owners serve: %q", round, first)
				}
				serving = i
			case !strings.HasPrefix(l, "E served"):
				t.Fatalf("round %d: owner %d: %q", round, i, l)
			}
		}
		if serving < 0 {
			t.Fatalf("round %d: no owner serves: %q", round, first)
		}
		c, err := net.Dial("unix", path)
		must(t, "dial", err)
		cred, err := peerCred(c.(*net.UnixConn))
		c.Close()
		must(t, "peer", err)
		if pid := kids[serving].cmd.Process.Pid; int(cred.Pid) != pid {
			t.Fatalf("round %d: pid %d serves the path, not the owner that said so (%d)", round, cred.Pid, pid)
		}
		for _, k := range kids {
			_ = k.cmd.Process.Signal(syscall.SIGKILL)
			k.kill()
		}
	}
	w, err := Serve(path, Options{Size: 4 << 20, FallbackPageable: true})
	must(t, "Serve after the last owner was killed", err)
	must(t, "owner Close", w.Close())
}

// A second Serve on a path served fails with ErrServed, which matches syscall.EADDRINUSE,
// and leaves the first serving; the first's Close lets a third serve.
func TestServeServedPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, FallbackPageable: true})
	must(t, "Serve", err)
	if _, err := Serve(path, Options{Size: 4 << 20, FallbackPageable: true}); !errors.Is(err, ErrServed) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second Serve: %v", err)
	}
	p := attachTest(t, path, AttachOptions{})
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
	w, err = Serve(path, Options{Size: 4 << 20, FallbackPageable: true})
	must(t, "Serve after Close", err)
	must(t, "owner Close", w.Close())
}
