package uvm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAcquireContext: with the budget held by acquired blocks, AcquireContext waits; it
// returns at once with the context's error when the context is cancelled, wakes when a Free
// (of an acquired block) makes room, and fails at once with other errors.
func TestAcquireContext(t *testing.T) {
	tr, s, hs := budgetPinned(t)
	if tr == nil {
		return
	}
	const size = pinnedSize

	// Cancelled while waiting.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tr.AcquireContext(ctx, hs[2], s, uvm.Read)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("AcquireContext returned while everything is pinned: %v", err)
	case <-time.After(30 * time.Millisecond): // it waits (and retried a few times meanwhile)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, uvm.ErrAllPinned) {
			t.Fatalf("cancelled AcquireContext: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireContext did not return after its context was cancelled")
	}
	if st := tr.Stats(); st.AcquiredBlocks != 2 || st.DeviceBytes != 2*size {
		t.Fatalf("a cancelled AcquireContext changed the tier: %+v", st)
	}

	// Other errors are not waited on.
	if _, err := tr.AcquireContext(context.Background(), 0, s, uvm.Read); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Fatalf("AcquireContext of a bad handle: %v", err)
	}

	// Woken by a Free of an acquired block.
	go func() {
		_, err := tr.AcquireContext(context.Background(), hs[2], s, uvm.Write)
		done <- err
	}()
	time.Sleep(5 * time.Millisecond)
	must(t, tr.Free(hs[0]))
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireContext did not wake when a Free made room")
	}
	if st := tr.Stats(); st.AcquiredBlocks != 2 || st.Blocks != 2 {
		t.Fatalf("after the wait: %+v", st)
	}
	for _, h := range hs[1:] {
		must(t, tr.Release(h, s))
		must(t, tr.Free(h))
	}
}
