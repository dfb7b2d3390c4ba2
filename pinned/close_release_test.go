package pinned

import (
	"errors"
	"sync"
	"testing"
)

// TestCloseRacingReleaseAfterCount: a last Release of a buffer freed while held that starts
// its free after Close counted the buffers the caller has (the buffer then counted as freed,
// not live) and before Close's look, after its drain, at what is still live. Close waits for
// that Release too, whose free releases the pool's memory: nil. It looked without waiting,
// found the buffer live and no buffer freed while held any more, and said ErrBusy, "wait for
// their streams", in a pool that has none, though the Release was giving the buffer back.
func TestCloseRacingReleaseAfterCount(t *testing.T) {
	p, err := New(Options{Backend: Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Hold(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	inFree, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(proceed) }) }
	relErr := make(chan error, 1)
	oldRelease, oldWait, oldCount := releaseHook, releaseWait, afterCloseCount
	defer func() { releaseHook, releaseWait, afterCloseCount = oldRelease, oldWait, oldCount }()
	releaseHook = func() { close(inFree); <-proceed }
	releaseWait = let // Close waits for the Release: let it make its free
	afterCloseCount = func() {
		afterCloseCount = nil
		go func() { relErr <- h.Release() }()
		<-inFree
	}
	err = p.Close()
	let()
	if rerr := <-relErr; rerr != nil {
		t.Fatalf("Release: %v", rerr)
	}
	if err != nil {
		t.Fatalf("Close during a last Release that began after its count: %v, want nil", err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
		t.Fatalf("after Close and the last Release: %+v", u)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close once more: %v, want ErrClosed", err)
	}
}
