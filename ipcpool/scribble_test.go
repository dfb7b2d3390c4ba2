package ipcpool

import (
	"errors"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A peer that writes random words all over the control region while the others run: no other
// process crashes, none reads wrong bytes through a handle (a read is right or refused as
// stale), none finds its own buffers changed (each child checks its own all along), and the
// owner still serves.
func TestScribblerHurtsNoOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 32 << 20, GrantSize: 2 << 20, RingSize: 16, FallbackPageable: true})
	must(t, "Serve", err)
	defer w.Close()
	kids := []*child{startChild(t, path), startChild(t, path)}
	bad := startChild(t, path, childQuietEnv+"=1")
	d := 300 * time.Millisecond
	if long() {
		d = 5 * time.Second
	}
	scribbled := make(chan string, 1)
	go func() {
		if _, err := bad.in.Write([]byte("W " + itoaMs(d) + "\n")); err != nil {
			scribbled <- err.Error()
			return
		}
		if bad.out.Scan() {
			scribbled <- bad.out.Text()
		}
		close(scribbled)
	}()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	type shared struct {
		h    Handle
		seed uint64
	}
	var live []shared
	ok := func(what, got string, stale bool) {
		t.Helper()
		if got == "OK" || stale && got == "E stale" {
			return
		}
		t.Fatalf("%s: %q", what, got)
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		k := kids[r.IntN(len(kids))]
		switch x := r.IntN(4); {
		case x == 0 || len(live) == 0:
			s := r.Uint64()
			line := k.do(t, "A %d %d", 1+r.IntN(8192), s)
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "H" {
				if strings.Contains(line, "pool full") {
					continue // a scribbled grant table can make the pool look full for a while
				}
				t.Fatalf("A: %q", line)
			}
			h, err := parseHandle(f[1:])
			must(t, "parse", err)
			live = append(live, shared{h, s})
		case x == 1:
			b := live[r.IntN(len(live))]
			ok("C", k.do(t, "C %s %d", fmtHandle(b.h), b.seed), true)
			// The owner reads it too: right, or refused.
			if ob, err := w.Bytes(b.h); err == nil {
				if verr := verify(ob, b.seed); verr != nil {
					t.Fatalf("the owner read wrong bytes through a live handle: %v", verr)
				}
			} else if !errors.Is(err, ErrStaleHandle) && !errors.Is(err, ErrForeignHandle) {
				t.Fatalf("owner Bytes: %v", err)
			}
		default:
			i := r.IntN(len(live))
			ok("F", k.do(t, "F %s", fmtHandle(live[i].h)), true)
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	if got, open := <-scribbled; !open || got != "OK" {
		t.Fatalf("the scribbler: %q", got)
	}
	bad.kill()
	for _, k := range kids {
		if got := k.do(t, "N"); !strings.HasPrefix(got, "G ") {
			t.Fatalf("child %d after the scribbling: %q", k.slot, got)
		}
		_, _ = k.in.Write([]byte("Q\n"))
		_ = k.cmd.Wait()
		k.dead = true
		if code := exitCode(k.cmd); code != 0 && code != 1 {
			t.Fatalf("child %d exited with %d (a panic or a signal)", k.slot, code)
		}
	}
	// The owner still serves and answers.
	k := startChild(t, path, childQuietEnv+"=1")
	h := k.alloc(t, 100, 1)
	b, err := w.Bytes(h)
	must(t, "Bytes after the scribbling", err)
	must(t, "verify", verify(b, 1))
	if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	k.quit(t)
}

func itoaMs(d time.Duration) string { return strconv.Itoa(int(d.Milliseconds())) }

// exitCode is a finished command's exit code, 128+n for a signal n.
func exitCode(c *exec.Cmd) int {
	st, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return -1
	case st.Signaled():
		return 128 + int(st.Signal())
	}
	return st.ExitStatus()
}
