package ipcpool

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A process that attaches while the owner waits for a pool to adopt, a wait (Options.Adopt)
// longer than Options.Timeout, is attached once the owner serves: it has the whole Timeout from
// the owner's serving, as the option says, however long the wait before. (The owner's session
// waited for the serving only Options.Timeout from when it ran, then refused the process as
// "not served now", ErrRefused, while its handshake's deadline was still to come.)
func TestAdoptWaitLongerThanTheTimeoutAttaches(t *testing.T) {
	const timeout, wait = time.Second, 3 * time.Second
	path := filepath.Join(t.TempDir(), "pool.sock")
	served := make(chan *Owner, 1)
	go func() {
		// Nothing to adopt: the owner makes a new pool after the wait.
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: wait, Timeout: timeout, FallbackPageable: true})
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	waitFor(t, func() bool { // the owner listens: it waits for a pool to adopt
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	p, err := Attach(ctx, path, AttachOptions{Timeout: 10 * time.Second, FallbackPageable: true})
	took := time.Since(start)
	w := <-served
	if w == nil {
		t.FailNow()
	}
	defer func() { must(t, "owner Close", w.Close()) }()
	if err != nil {
		t.Fatalf("Attach during a wait to adopt of %v (Options.Timeout %v), %v after it began: %v; "+
			"want it attached once the owner serves", wait, timeout, took, err)
	}
	must(t, "Close", p.Close())
}
