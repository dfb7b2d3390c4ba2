package shared

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ownerChildEnv makes the test binary the owner of a pool at the path it names, with rings of
// 2 entries that it never drains; it prints the handles of 3 buffers and waits.
const ownerChildEnv = "PINMALLOC_SHARED_TEST_OWNER"

func runOwnerChild(path string) int {
	w, err := Serve(path, Options{Size: 4 << 20, RingSize: 2, DrainInterval: time.Hour, FallbackPageable: true})
	if err != nil {
		fmt.Println("E", err)
		return 1
	}
	for i := 0; i < 3; i++ {
		b, _ := w.Alloc(64)
		h, _ := w.Handle(b)
		fmt.Println("H", fmtHandle(h))
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
	return 0
}

// A free waiting on a full ring of an owner that exits returns ErrClosed instead of waiting
// forever.
func TestOwnerExitUnblocksFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerChildEnv+"="+path)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	sc := bufio.NewScanner(out)
	var hs []Handle
	for len(hs) < 3 && sc.Scan() {
		h, err := parseHandle(strings.Fields(sc.Text())[1:])
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		hs = append(hs, h)
	}
	if len(hs) != 3 {
		t.Fatal("the owner did not start")
	}
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Detach()
	for _, h := range hs[:2] {
		if err := p.FreeHandle(h); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- p.FreeHandle(hs[2]) }()
	select {
	case err := <-done:
		t.Fatalf("a free into a full ring returned at once: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed = true
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the waiting free after the owner exited: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a free waits on the ring of an owner that exited")
	}
}
