package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// serveTest serves a pool for a test (6 MiB, FallbackPageable: CI runs as nobody at 8 MiB
// memlock) and closes it at cleanup.
func serveTest(t *testing.T, o Options) (*Owner, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.sock")
	if o.Size == 0 {
		o.Size = 6 << 20
	}
	o.FallbackPageable = true
	w, err := Serve(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("owner Close: %v", err)
		}
	})
	return w, path
}

// attachTest attaches this process to the pool at path a second time (the same test process:
// the protocol, the mappings and the memory are those of another process).
func attachTest(t *testing.T, path string, o AttachOptions) *Process {
	t.Helper()
	o.FallbackPageable = true
	p, err := Attach(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func fillSeq(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func checkSeq(t *testing.T, b []byte, seed byte) {
	t.Helper()
	for i := range b {
		if b[i] != seed+byte(i*7) {
			t.Fatalf("byte %d of %d is %#x, want %#x", i, len(b), b[i], seed+byte(i*7))
		}
	}
}

func TestAttachAllocHandle(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	if p.Slot() == 0 {
		t.Fatal("an attached process in the owner's slot")
	}
	b, err := p.Alloc(1000)
	must(t, "Alloc", err)
	fillSeq(b, 1)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	if h2, err := p.Handle(b[:10]); err != nil || h2 != h {
		t.Fatalf("Handle again: %v, %v (want %v)", h2, err, h)
	}
	ob, err := w.Bytes(h)
	must(t, "owner Bytes", err)
	checkSeq(t, ob, 1)
	if oh, err := w.Handle(ob); err != nil || oh != h {
		t.Fatalf("the owner's Handle of a buffer it mapped: %v, %v", oh, err)
	}
	// The owner frees it by address: it goes back to its holder.
	must(t, "owner Free of a peer's buffer", w.Free(ob))
	waitFor(t, func() bool { p.Collect(); return p.Pool.Stats().Live == 0 })
	for _, f := range []func() error{
		func() error { _, err := w.Bytes(h); return err },
		func() error { return w.FreeHandle(h) },
		func() error { return p.FreeHandle(h) },
		func() error { return w.Retain(h) },
	} {
		if err := f(); !errors.Is(err, ErrStaleHandle) || !errors.Is(err, pinmalloc.ErrNotOwned) {
			t.Fatalf("a freed buffer's handle: %v, want ErrStaleHandle", err)
		}
	}
	// The attached process frees the owner's buffer by handle; a replay is refused.
	wb, err := w.Alloc(64)
	must(t, "owner Alloc", err)
	wh, err := w.Handle(wb)
	must(t, "owner Handle", err)
	must(t, "FreeHandle", p.FreeHandle(wh))
	if err := p.FreeHandle(wh); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("a replayed FreeHandle: %v", err)
	}
	// A double free, whether the retirement still waits in the holder's ring or its drainer has
	// taken it in (handlefreed_doublefree_test.go).
	if err := w.Free(wb); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Fatalf("the holder's Free after a FreeHandle: %v, want ErrDoubleFree", err)
	}
	waitFor(t, func() bool { w.Collect(); return w.Pool.Stats().Live == 0 })
}

// A buffer freed and reallocated in place: the old handle names the old allocation, and is
// refused, never the new buffer.
func TestReplayedHandleNeverTouchesNewBuffer(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(256)
	must(t, "Alloc", err)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	must(t, "Free", p.Free(b))
	c, err := p.Alloc(256)
	must(t, "Alloc", err)
	fillSeq(c, 9)
	c2 := c
	if &c[0] != &b[0] {
		t.Logf("not allocated in place (%p, %p): the check still holds", &c[0], &b[0])
	}
	if err := w.FreeHandle(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("a replayed handle of a buffer freed: %v", err)
	}
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("Bytes of a freed buffer's handle: %v", err)
	}
	checkSeq(t, c2, 9)
	must(t, "Free", p.Free(c))
	if st := p.SharedStats(); st.Exported != 0 {
		t.Fatalf("%d buffers still exported", st.Exported)
	}
}

// Retain: the buffer lives until the last reference goes, whoever frees the allocation.
func TestRetainKeepsBufferUntilLastRelease(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	q := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 3)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	must(t, "Retain", q.Retain(h))
	must(t, "Retain twice", q.Retain(h))
	must(t, "owner Retain", w.Retain(h))
	must(t, "holder Free", p.Free(b)) // the allocation goes; the retains keep it
	if _, err := q.Bytes(h); err != nil {
		t.Fatalf("Bytes of a retained buffer after its holder freed it: %v", err)
	}
	must(t, "Release", q.Release(h))
	must(t, "owner Release", w.Release(h))
	qb, err := q.Bytes(h)
	must(t, "Bytes", err)
	checkSeq(t, qb, 3)
	if p.Pool.Stats().Live != 1 {
		t.Fatal("the buffer went with a retain left")
	}
	must(t, "last Release", q.Release(h))
	if err := q.Release(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("a Release too many: %v", err)
	}
	waitFor(t, func() bool { p.Collect(); return p.Pool.Stats().Live == 0 })
	if err := q.Retain(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("Retain of a buffer let go: %v", err)
	}
	if st := p.SharedStats(); st.RetiredIn != 1 {
		t.Fatalf("holder: %+v", st)
	}
}

func TestForeignHandleAndSlice(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(1000)
	must(t, "Alloc", err)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	for _, bad := range []Handle{
		{Pool: h.Pool + 2, Entry: h.Entry, Gen: h.Gen, Offset: h.Offset, Length: h.Length},
		{Pool: h.Pool, Entry: 1 << 30, Gen: h.Gen, Offset: h.Offset, Length: h.Length},
		{Pool: h.Pool, Entry: h.Entry, Gen: h.Gen, Offset: 1 << 40, Length: 1},
		{Pool: h.Pool, Entry: h.Entry, Gen: h.Gen, Offset: h.Offset, Length: 0},
		{Pool: h.Pool, Entry: h.Entry, Gen: h.Gen, Offset: 6<<20 - 8, Length: 1 << 20},
	} {
		if _, err := w.Bytes(bad); !errors.Is(err, ErrForeignHandle) {
			t.Errorf("Bytes(%v): %v, want ErrForeignHandle", bad, err)
		}
	}
	for _, bad := range []Handle{
		{Pool: h.Pool, Entry: h.Entry, Gen: h.Gen + 1, Offset: h.Offset, Length: h.Length},
		{Pool: h.Pool, Entry: h.Entry, Gen: h.Gen, Offset: h.Offset + 16, Length: h.Length - 16},
		{Pool: h.Pool, Entry: h.Entry + 1, Gen: h.Gen, Offset: h.Offset, Length: h.Length},
	} {
		if err := w.FreeHandle(bad); !errors.Is(err, ErrStaleHandle) {
			t.Errorf("FreeHandle(%v): %v, want ErrStaleHandle", bad, err)
		}
	}
	// An interior slice of a peer's buffer, and one never mapped with Bytes: errors.
	ob, err := w.Bytes(h)
	must(t, "Bytes", err)
	if err := w.Free(ob[16:]); err == nil {
		t.Fatal("the owner's Free of an interior slice of a peer's buffer returned nil")
	}
	if err := w.Free(make([]byte, 64)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("Free of Go memory: %v", err)
	}
	if _, err := w.Handle(make([]byte, 64)); !errors.Is(err, ErrForeignHandle) {
		t.Fatalf("Handle of Go memory: %v", err)
	}
	must(t, "Free", p.Free(b))
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !f(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("timed out")
		}
	}
}
