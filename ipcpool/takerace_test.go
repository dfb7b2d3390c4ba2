package ipcpool

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// A take-in paused as it gives a buffer back to its pool (the holder's drain of a peer's
// FreeHandle, or its scan of a buffer it freed after the owner let the allocation go), and a
// call that finds the buffer meanwhile by its address. (The take-in forgot its record before
// its FreeShared: the holder's Free of the buffer, a second free, found no record, so the pool
// freed it and the Free returned nil; the take-in's FreeShared then failed, FreeErrors up. Had
// the block been allocated and shared again in between, the FreeShared freed a live buffer.)

// takePause pauses p's take-ins, before their FreeShared (freed false) or after it, until
// release is closed: reached is closed as the first one pauses, waiting gets a value as a call
// waits for it.
type takePause struct {
	reached, release chan struct{}
	waiting          chan struct{}
	free             func() // closes release, once
}

func pauseTakes(t *testing.T, p *Process, freed bool) *takePause {
	tp := &takePause{reached: make(chan struct{}), release: make(chan struct{}),
		waiting: make(chan struct{}, 1)}
	var once, released sync.Once
	tp.free = func() { released.Do(func() { close(tp.release) }) }
	t.Cleanup(tp.free) // a test that fails while a take-in is paused
	p.ex.mu.Lock()
	p.pauseTake = func(f bool) {
		if f == freed {
			once.Do(func() { close(tp.reached); <-tp.release })
		}
	}
	p.waiting = func() {
		select {
		case tp.waiting <- struct{}{}:
		default:
		}
	}
	p.ex.mu.Unlock()
	return tp
}

// racingCall runs call while the take-in is paused: answered at once, its error must be one
// of now; waiting, it must end with one of after once the take-in goes on.
func (tp *takePause) racingCall(t *testing.T, what string, call func() error, now, after []error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		tp.free()
		if !isOne(err, now) {
			t.Fatalf("%s while the take-in gives the buffer back: %v, want one of %v",
				what, err, now)
		}
	case <-tp.waiting:
		tp.free()
		err := <-done
		if !isOne(err, after) {
			t.Fatalf("%s after waiting for the take-in: %v, want one of %v", what, err, after)
		}
		t.Logf("%s waited for the take-in: %v", what, err)
	}
}

// isOne reports whether err is one of want (nil: no error).
func isOne(err error, want []error) bool {
	for _, w := range want {
		if w == nil && err == nil || w != nil && errors.Is(err, w) {
			return true
		}
	}
	return false
}

// takenIn waits until p has taken in n buffers in all (or failed to), and checks none failed.
func takenIn(t *testing.T, p *Process, n uint64) {
	t.Helper()
	waitFor(t, func() bool { s := p.SharedStats(); return s.RetiredIn+s.FreeErrors >= n })
	if s := p.SharedStats(); s.FreeErrors != 0 {
		t.Fatalf("the take-in's FreeShared failed %d times (the buffer freed under it)",
			s.FreeErrors)
	}
}

// The holder's Free of a buffer a peer's FreeHandle let go, as the holder's drain takes it in:
// a second free, refused (ErrStaleHandle before the take-in, ErrDoubleFree after it), and the
// take-in's FreeShared frees the buffer.
func TestFreeRacingTakeRetired(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	b, err := w.Alloc(100)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	before := w.SharedStats().RetiredIn
	tp := pauseTakes(t, w.Process, false)
	must(t, "FreeHandle", p.FreeHandle(h))
	go w.Collect()
	<-tp.reached
	tp.racingCall(t, "the holder's Free", func() error { return w.Free(b) },
		[]error{ErrStaleHandle}, secondFree)
	takenIn(t, w.Process, before+1)
	checkReuse(t, w, p)
}

// A buffer allocated at the address of one a take-in just gave back, and shared, before the
// take-in forgot its record: shared as any (its Handle waits for the take-in, if it must), and
// the take-in leaves it alone.
func TestShareRacingTakeRetired(t *testing.T) {
	w, path := serveOneShard(t)
	p := attachTest(t, path, AttachOptions{})
	b, err := w.Alloc(100)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	before := w.SharedStats().RetiredIn
	tp := pauseTakes(t, w.Process, true)
	must(t, "FreeHandle", p.FreeHandle(h))
	go w.Collect()
	<-tp.reached
	b2 := allocAt(t, w.Process, mem.Addr(b))
	var h2 Handle
	share := func() error { h2, err = w.Handle(b2); return err }
	tp.racingCall(t, "Handle of the new buffer", share, []error{nil}, []error{nil})
	takenIn(t, w.Process, before+1)
	fillSeq(b2, 9)
	got, err := p.Bytes(h2)
	must(t, "Bytes of the new buffer", err)
	checkSeq(t, got, 9)
	must(t, "FreeHandle of the new buffer", p.FreeHandle(h2))
	takenIn(t, w.Process, before+2)
	checkReuse(t, w, p)
}

// The free of a buffer allocated at the address of one a take-in just gave back, held
// (pinned.Pool.Hold: its free asks the Sharer), before the take-in forgot its record: a free as
// any (it waits for the take-in, if it must), which takes effect at the hold's Release.
func TestHeldFreeRacingTakeRetired(t *testing.T) {
	w, path := serveOneShard(t)
	p := attachTest(t, path, AttachOptions{})
	b, err := w.Alloc(100)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	before := w.SharedStats().RetiredIn
	tp := pauseTakes(t, w.Process, true)
	must(t, "FreeHandle", p.FreeHandle(h))
	go w.Collect()
	<-tp.reached
	b2 := allocAt(t, w.Process, mem.Addr(b))
	hold, err := w.Hold(b2)
	must(t, "Hold", err)
	tp.racingCall(t, "Free of the new buffer", func() error { return w.Free(b2) },
		[]error{nil}, []error{nil})
	takenIn(t, w.Process, before+1)
	must(t, "Release", hold.Release())
	if err := w.Free(b2); !isOne(err, secondFree[1:]) {
		t.Fatalf("a second Free of the new buffer: %v, want one of %v", err, secondFree[1:])
	}
	checkReuse(t, w, p)
}

// allocAt allocates 100 bytes of p's pool until it gets the block at addr, and frees the
// others. Its pool has one home shard (serveOneShard): a goroutine that the scheduler moves to
// another P allocates from the same heap. An Alloc made while that shard was busy comes from a
// spill shard, and may have filled the pool before the block came: then the others go back
// and it tries again.
func allocAt(t *testing.T, p *Process, addr uintptr) []byte {
	t.Helper()
	var others [][]byte
	freeOthers := func() {
		for _, o := range others {
			must(t, "Free", p.Free(o))
		}
		others = others[:0]
	}
	defer freeOthers()
	for range 10 {
		for range 1 << 16 {
			b, err := p.Alloc(100)
			if errors.Is(err, pinmalloc.ErrOutOfMemory) {
				break
			}
			must(t, "Alloc", err)
			if mem.Addr(b) == addr {
				return b
			}
			others = append(others, b)
		}
		freeOthers()
		runtime.Gosched()
	}
	t.Fatalf("the pool never gave the block at %#x back", addr)
	return nil
}

// serveOneShard is serveTest with a pool of one home shard (allocAt).
func serveOneShard(t *testing.T) (*Owner, string) {
	return serveTest(t, Options{Pool: pinned.Options{Shards: 1}})
}

// checkReuse checks w's pool is whole after a race: a buffer allocated, shared and let go.
func checkReuse(t *testing.T, w *Owner, p *Process) {
	t.Helper()
	n := w.SharedStats().RetiredIn
	b, err := w.Alloc(100)
	must(t, "Alloc after", err)
	h, err := w.Handle(b)
	must(t, "Handle after", err)
	must(t, "FreeHandle after", p.FreeHandle(h))
	w.Collect()
	takenIn(t, w.Process, n+1)
}

// secondFree are the answers to a second free of a buffer: before its take-in, and after it
// (the block free in the pool, or its memory gone back with its grant since).
var secondFree = []error{ErrStaleHandle, pinned.ErrDoubleFree, pinned.ErrNotOwned, ErrForeignHandle}

// The same race on the scan's take-in of a buffer the holder freed after the owner let its
// allocation go (takeGone: the process left its socket alive), and a second Free of it.
func TestFreeRacingTakeGone(t *testing.T) {
	_, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	b, err := p.Alloc(100)
	must(t, "Alloc", err)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	// What a Free of it leaves when its take-in backed off (a retain landed on the mark) and
	// the owner, which lost the process alive, then let the entry go: the buffer still held in
	// the pool, for the scan to take in (written here: the owner sees a process of its own
	// process that leaves its socket exited, and keeps no eGone).
	e := int(h.Entry)
	p.c.store(p.c.entry(e)+eState, packState(h.Gen+1, eGone))
	before := p.SharedStats().RetiredIn
	tp := pauseTakes(t, p, false)
	p.ex.mu.Lock()
	p.ex.recs[e-p.slot*p.exports].dropped = true
	p.ex.mu.Unlock()
	go func() {
		p.drainMu.Lock()
		p.scanRetired()
		p.drainMu.Unlock()
	}()
	<-tp.reached
	tp.racingCall(t, "a second Free", func() error { return p.Free(b) },
		[]error{ErrStaleHandle}, secondFree)
	takenIn(t, p, before+1)
}
