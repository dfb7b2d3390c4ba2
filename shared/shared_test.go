package shared

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
)

func serveTest(t *testing.T, o Options) (*Owner, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.sock")
	if o.Size == 0 {
		o.Size = 6 << 20
	}
	w, err := Serve(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return w, path
}

func TestAttachAllocHandle(t *testing.T) {
	w, path := serveTest(t, Options{FallbackPageable: true})
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = byte(i)
	}
	h, err := p.Handle(b)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := w.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ob {
		if ob[i] != byte(i) {
			t.Fatalf("byte %d: %d", i, ob[i])
		}
	}
	// The owner's buffer, freed by the attached process.
	wb, _ := w.Alloc(64)
	wh, _ := w.Handle(wb)
	if err := p.FreeHandle(wh); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { w.Collect(); return w.Stats().Heap.Live == 0 })
	if err := w.FreeHandle(h); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { p.Collect(); return p.Stats().Heap.Live == 0 })
	if got := w.Stats().RemoteFreesOut; got != 1 {
		t.Errorf("owner sent %d remote frees, want 1", got)
	}
	if err := w.Close(); !errors.Is(err, ErrAttached) || !errors.Is(err, pinmalloc.ErrLiveBlocks) {
		t.Fatalf("Close with a process attached: %v", err)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The detached process's memory is back: its handles are stale.
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) || !errors.Is(err, pinmalloc.ErrNotOwned) {
		t.Fatalf("Bytes of a detached process's handle: %v", err)
	}
	if got := w.Stats().Grants; got != 2<<20 {
		t.Errorf("owner holds %d bytes of grants, want one grant", got)
	}
}

func TestForeignHandle(t *testing.T) {
	w1, _ := serveTest(t, Options{FallbackPageable: true})
	w2, _ := serveTest(t, Options{FallbackPageable: true})
	b, _ := w1.Alloc(100)
	h, _ := w1.Handle(b)
	if _, err := w2.Bytes(h); !errors.Is(err, ErrForeignHandle) {
		t.Fatalf("another pool's handle: %v", err)
	}
	h2 := h
	h2.Offset = 1 << 40
	if _, err := w1.Bytes(h2); !errors.Is(err, ErrForeignHandle) {
		t.Fatalf("handle beyond the region: %v", err)
	}
	if err := w2.Free(b); !errors.Is(err, ErrForeignHandle) {
		t.Fatalf("Free of another pool's buffer: %v", err)
	}
	if _, err := w1.Handle(make([]byte, 10)); !errors.Is(err, ErrForeignHandle) {
		t.Fatalf("Handle of Go memory: %v", err)
	}
	if _, err := w1.Handle(b[1:]); !errors.Is(err, ErrForeignHandle) && !errors.Is(err, pinmalloc.ErrNotOwned) {
		t.Fatalf("Handle of a sub-slice: %v", err)
	}
	if err := w1.Free(b); err != nil {
		t.Fatal(err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	// A socket file nobody serves, as an owner that died leaves it.
	w, err := Serve(path, Options{FallbackPageable: true, Size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	w.ln.SetUnlinkOnClose(false)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	w2, err := Serve(path, Options{FallbackPageable: true, Size: 2 << 20})
	if err != nil {
		t.Fatalf("Serve over a stale socket: %v", err)
	}
	if _, err := Serve(path, Options{FallbackPageable: true, Size: 2 << 20}); err == nil {
		t.Fatal("a second owner took a served socket")
	}
	// The second owner's probe left as a detach: the first one counts it until it has read it.
	waitFor(t, func() bool { return w2.Attached() == 0 })
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSocketMode(t *testing.T) {
	_, path := serveTest(t, Options{FallbackPageable: true})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatal("condition not met in 5 s")
}
