package ipcpool

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
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
