package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestLateGrantsForgottenWithTheirConnection: a grant request that gave up (forget records it
// in late, for its reply to be given back) whose connection then ends without that reply
// leaves no record behind: no reply comes on a connection that has ended, and the owner that
// takes the process back claims none of those grants by its record. Before, the reader's
// cleanup cleared pending and not late: an entry stayed for the process's life per request
// that gave up before its owner went.
func TestLateGrantsForgottenWithTheirConnection(t *testing.T) {
	const requests = 3
	ours, owner := unixPair(t)
	h := hello{pool: 1, slot: 1, serial: 1,
		layout: layout{regions: 1, regionSize: 8 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}}
	cl := newClient(ours, filepath.Join(t.TempDir(), "no-owner.sock"), 20*time.Millisecond, nil, h)
	cl.start()
	for i := range requests {
		granted := make(chan error, 1)
		go func() {
			_, err := cl.grant(1)
			granted <- err
		}()
		if m, err := readMsg(owner); err != nil || m.op != opGrant { // read, never answered
			t.Fatalf("request %d: the owner read %+v, %v; want a grant request", i, m, err)
		}
		if err := <-granted; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request %d, never answered: %v, want a timeout", i, err)
		}
	}
	lateEntries := func() int {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.late)
	}
	if n := lateEntries(); n != requests {
		t.Fatalf("%d requests gave up, %d recorded late", requests, n)
	}
	must(t, "the owner's close", owner.Close()) // it dies: no reply comes
	waitFor(t, func() bool {                    // the reader has ended (its cleanup done)
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.c == nil
	})
	if n := lateEntries(); n != 0 {
		t.Errorf("%d requests that gave up still recorded late after their connection ended, want 0", n)
	}
	cl.close() // stops its rejoin (no owner at the path)
}
