package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// TestMemlockFallback runs itself again under a 4 MiB RLIMIT_MEMLOCK (memlocktest, as nobody
// when the test runs as root). There a pool of 8 MiB fails with ErrMemlock, and with
// FallbackPageable serves pageable and says so; an attach whose lock is refused fails the same
// way, leaving its slot free at once, or falls back.
func TestMemlockFallback(t *testing.T) {
	if memlocktest.Child(t) {
		memlockChild(t)
		return
	}
	memlocktest.Run(t, "TestMemlockFallback")
}

func memlockChild(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	if _, err := Serve(path, Options{Size: 8 << 20}); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Serve of 8 MiB under a 4 MiB limit: %v", err)
	}
	w, err := Serve(path, Options{Size: 8 << 20, FallbackPageable: true})
	must(t, "Serve with FallbackPageable", err)
	defer w.Close()
	if st := w.SharedStats(); len(st.PageableRegions) != 1 || !strings.Contains(st.PageableRegions[0], "memlock") {
		t.Fatalf("PageableRegions %q, want the one refusal and why", st.PageableRegions)
	}
	if _, err := Attach(context.Background(), path, AttachOptions{}); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Attach of 8 MiB under a 4 MiB limit: %v", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("a refused Attach holds a slot: %d attached", n)
	}
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach with FallbackPageable", err)
	b, err := p.Alloc(100)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b))
	if len(p.SharedStats().PageableRegions) != 1 {
		t.Fatalf("the attached process does not report its pageable pool")
	}
	must(t, "Close", p.Close())
}

// TestLockFailsPartway: a lock whose mlock fails part-way (the first half of the range locked
// for real, then an error) leaves nothing of the range locked. Before, the half stayed locked,
// charged to RLIMIT_MEMLOCK, in a pool that then went on pageable (FallbackPageable).
func TestLockFailsPartway(t *testing.T) {
	const size = 256 << 10
	b := memlocktest.Anonymous(t, size)
	before := memlocktest.Locked(t)
	mlock = memlocktest.FailPartway(t)
	defer func() { mlock = unix.Mlock }()
	if err := lock(mem.Addr(b), size, lockNow); !errors.Is(err, ErrMemlock) {
		t.Fatalf("lock with mlock failing part-way: %v; want ErrMemlock", err)
	}
	if got := memlocktest.Locked(t); got != before {
		t.Errorf("after the failed lock %d bytes are locked, %d before", got, before)
	}
}
