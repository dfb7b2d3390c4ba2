package ipcpool

import (
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestGrantAnsweredAsCloseRunsIsAValidBuffer: an Alloc of an attached process whose grant
// request is under way as the process's Close runs (its reply held back, in the reader's hands,
// until Close has unmapped the pool, or long past when it would have) gets a buffer it can use,
// or ErrClosed: never one at an address the process no longer maps. Close waits for it (the
// Alloc holds its shard of the process's pool, which Close's count of the live buffers takes),
// gives the buffer up (ErrLiveBlocks: junk memory of the process's own from then on, as any
// buffer live at Close), and the grant goes back to the owner at the detach (fenced), lent to
// the process gone no more. It passed as it is: no fix needed.
func TestGrantAnsweredAsCloseRunsIsAValidBuffer(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	closed := make(chan error, 1)
	cl := p.cl
	cl.mu.Lock()
	cl.pause = func(m msg) {
		if m.a != stOK {
			return
		}
		go func() { closed <- p.Close() }()
		// Until Close has left the pool (unmapped it), or long past when it would have, had it not
		// waited for this Alloc.
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			p.leaveMu.Lock()
			left := p.left
			p.leaveMu.Unlock()
			if left {
				return
			}
		}
	}
	cl.mu.Unlock()
	use := func(b []byte) (err error) {
		debug.SetPanicOnFault(true)
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("a fault: %v", r)
			}
		}()
		fillSeq(b, 3)
		return nil
	}
	b, err := p.Alloc(4096)
	switch {
	case err == nil:
		if err := use(b); err != nil {
			t.Fatalf("the buffer of a grant answered as Close ran, used: %v", err)
		}
	case !errors.Is(err, pinmalloc.ErrClosed):
		t.Fatalf("Alloc racing Close: %v, want a buffer or ErrClosed", err)
	}
	cerr := <-closed
	if err == nil && !errors.Is(cerr, pinned.ErrLiveBlocks) || err != nil && cerr != nil {
		t.Fatalf("Close racing an Alloc (its error %v): %v", err, cerr)
	}
	if err == nil {
		if err := use(b); err != nil { // given up at Close: junk memory, no fault
			t.Fatalf("a buffer given up at Close, used: %v", err)
		}
	}
	w.mu.Lock()
	for g := range w.table {
		if st := w.table[g]; st.state == gHeld && st.slot == p.slot || st.state == gLimbo || st.state == gOrphan {
			t.Errorf("grant %d after the process's Close: state %d (slot %d), want free or fenced", g, st.state, st.slot)
		}
	}
	w.mu.Unlock()
	if err == nil {
		must(t, "Free of a buffer given up at Close", p.Free(b))
	}
}
