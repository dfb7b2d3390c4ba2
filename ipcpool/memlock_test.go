package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

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
