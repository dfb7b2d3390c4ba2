package ipcpool

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A process that attaches while the owner waits for a pool to adopt, and whose handshake's
// deadline (Options.Timeout from the wait's end) comes while the owner still makes its new
// pool, fails with an error matching context.DeadlineExceeded, not ErrRefused: its handshake
// took too long, as with a ready the owner gave up (docs/ipcpool.md, "Deadlines"). The owner
// serves once its pool is made. (The owner answered "not served now", and Attach failed with
// ErrRefused.)
func TestAttachGivenUpWhileTheOwnerMakesItsPoolIsATimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	path := filepath.Join(t.TempDir(), "pool.sock")
	made := make(chan struct{})
	newProcessFails = func(h hello) error {
		if h.slot == 0 { // the owner's new pool: made once the attach has its answer
			select {
			case <-made:
			case <-time.After(30 * time.Second):
			}
		}
		return nil
	}
	served := make(chan *Owner, 1)
	go func() {
		// Nothing to adopt: the owner makes a new pool after the wait.
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: 100 * time.Millisecond, Timeout: timeout, FallbackPageable: true})
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	t.Cleanup(func() { newProcessFails = nil })
	waitFor(t, func() bool { // the owner listens: it waits for a pool to adopt
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	start := time.Now()
	_, err := Attach(context.Background(), path, AttachOptions{Timeout: 20 * time.Second, FallbackPageable: true})
	took := time.Since(start)
	close(made)
	w := <-served
	if w == nil {
		t.FailNow()
	}
	defer func() { must(t, "owner Close", w.Close()) }()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRefused) || took > 10*time.Second {
		t.Fatalf("Attach whose handshake's deadline (Options.Timeout %v) came while the owner made its pool: %v after %v; "+
			"want a timeout at the owner's deadline, not ErrRefused", timeout, err, took)
	}
	p, err := Attach(context.Background(), path, AttachOptions{Timeout: 20 * time.Second, FallbackPageable: true})
	must(t, "Attach once the owner serves", err)
	must(t, "Close", p.Close())
}
