package shared

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A VMM pool: the owner's regions are exportable host granules, an attached process (here,
// and another process) imports and maps them; buffers pass by handle both ways; a killed
// process's memory comes back; every driver object is gone at the end.
func TestVMMPool(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	dev := cuda.Wrap[*pcuda.Device](d)
	path := filepath.Join(t.TempDir(), "pool.sock")
	if _, err := Serve(path, Options{Size: 8 << 20, Backend: VMM}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("a VMM pool without a device: %v", err)
	}
	w, err := Serve(path, Options{Size: 8 << 20, Backend: VMM, Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(path, AttachOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("attaching to a VMM pool without a device: %v", err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	p, err := Attach(path, AttachOptions{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(5000)
	if err != nil {
		t.Fatal(err)
	}
	fill(b, 5)
	h, _ := p.Handle(b)
	ob, err := w.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ob, 5); err != nil {
		t.Fatal(err)
	}
	// The same pool from another process: it imports the granules there.
	k := startChild(t, path, childDeviceEnv+"=1")
	line := k.do(t, "A 3000 6")
	kh, err := parseHandle(strings.Fields(line)[1:])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	kb, err := w.Bytes(kh)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(kb, 6); err != nil {
		t.Fatal(err)
	}
	if got := k.do(t, "C %s 5", fmtHandle(h)); got != "OK" {
		t.Fatalf("the child reads the attached process's buffer: %s", got)
	}
	if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { p.Collect(); return p.Stats().Heap.Live == 0 })
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.dead = true
	waitFor(t, func() bool { return w.Attached() == 1 })
	if _, err := w.Bytes(kh); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the killed process's handle: %v", err)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
}
