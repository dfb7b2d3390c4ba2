package ipcpool

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// A call under way as its process's Close runs (Bytes, FreeHandle, Retain, paused as it
// resolves its handle while another goroutine closes the process) ends with its result or
// ErrClosed, never a fault: Close waits for it before it unmaps the control region and the
// pool. (Close unmapped them under the call, which read them: a fault.)
func TestCloseWaitsForCallsUnderWay(t *testing.T) {
	w, path := serveTest(t, Options{})
	for _, c := range []struct {
		name string
		call func(p *Process, h Handle) error
	}{
		{"Bytes", func(p *Process, h Handle) error { _, err := p.Bytes(h); return err }},
		{"FreeHandle", func(p *Process, h Handle) error { return p.FreeHandle(h) }},
		{"Retain", func(p *Process, h Handle) error { return p.Retain(h) }},
	} {
		b, err := w.Alloc(100)
		must(t, "Alloc", err)
		h, err := w.Handle(b)
		must(t, "Handle", err)
		p := attachTest(t, path, AttachOptions{})
		closed := make(chan error, 1)
		p.pause = func() {
			p.pause = nil
			go func() { closed <- p.Close() }()
			for !p.closed.Load() {
				runtime.Gosched()
			}
			select { // a Close that does not wait for the call returns at once
			case err := <-closed:
				closed <- err
			case <-time.After(200 * time.Millisecond):
			}
		}
		done := make(chan error, 1)
		go func() {
			debug.SetPanicOnFault(true)
			defer func() {
				if r := recover(); r != nil {
					done <- fmt.Errorf("a fault: %v", r)
				}
			}()
			done <- c.call(p, h)
		}()
		if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("%s racing Close: %v", c.name, err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close racing %s: %v", c.name, err)
		}
		if c.name != "FreeHandle" {
			must(t, "Free", w.Free(b))
		}
	}
}

// A second Close while the first is under way reports ErrClosed and leaves the first to
// finish: the first detaches and returns nil. (The second hung up the connection under the
// first, whose detach failed: the owner saw the process cut off, not leaving.)
func TestCloseRacingClose(t *testing.T) {
	w, path := serveTest(t, Options{})
	b, err := w.Alloc(100)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	p := attachTest(t, path, AttachOptions{})
	first := make(chan error, 1)
	var second error
	p.pause = func() { // the first Close waits for this call: the second comes meanwhile
		p.pause = nil
		go func() { first <- p.Close() }()
		for !p.closed.Load() {
			runtime.Gosched()
		}
		second = p.Close()
	}
	_, err = p.Bytes(h)
	must(t, "Bytes", err)
	if !errors.Is(second, ErrClosed) {
		t.Errorf("a second Close: %v, want ErrClosed", second)
	}
	must(t, "the first Close, with a second racing it", <-first)
	must(t, "Free", w.Free(b))
}

// The owner's Close as soon as the last process has left (Attached is 0 from the moment its
// slot is free) lets that process's Close have its answer: it returns nil at once. (The
// owner's Close closed the connection of the process that had just left, before the answer
// to its detach: the process's Close waited out its timeout and failed.)
func TestOwnerCloseAsLastProcessLeaves(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: 2 * time.Second})
	owner := make(chan error, 1)
	w.mu.Lock()
	w.pauseDetach = func() {
		go func() { owner <- w.Close() }() // it waits for this session to end
		// Until the owner's Close has cut the process's connection, or long past when it would.
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			p.cl.mu.Lock()
			cut := p.cl.c == nil
			p.cl.mu.Unlock()
			if cut {
				return
			}
		}
	}
	w.mu.Unlock()
	start := time.Now()
	must(t, "Close", p.Close())
	if d := time.Since(start); d > time.Second {
		t.Errorf("the process's Close took %v", d)
	}
	must(t, "the owner's Close as the process leaves", <-owner)
}

// TestOwnerFreeAfterClose: the owner's buffer given up at Close (ErrLiveBlocks), freed after it,
// ends its pool's arena, whose last grant goes back to a table that is gone: nothing is given
// back, and the Free returns nil as a process's does. The release wrote the table's word into
// the control region Close had unmapped: the process died of SIGSEGV.
func TestOwnerFreeAfterClose(t *testing.T) {
	owner, err := Serve(filepath.Join(t.TempDir(), "pool.sock"), Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := owner.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a buffer live: %v, want ErrLiveBlocks", err)
	}
	if err := owner.Free(b); err != nil {
		t.Fatalf("Free of a buffer given up at Close: %v", err)
	}
	if err := owner.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close again: %v, want ErrClosed", err)
	}
}
