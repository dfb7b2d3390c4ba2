package shared

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// TestMemlockFallback runs itself again under a 4 MiB RLIMIT_MEMLOCK (memlocktest, as nobody
// when the test runs as root). There a pool of 8 MiB fails with ErrMemlock, and with
// FallbackPageable serves pageable and says so in Stats; an attach whose lock is refused fails
// the same way, or falls back.
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
	if err != nil {
		t.Fatalf("Serve with FallbackPageable: %v", err)
	}
	defer w.Close()
	if st := w.Stats(); len(st.PageableRegions) != 1 || !strings.Contains(st.PageableRegions[0], "memlock") {
		t.Fatalf("PageableRegions %q, want the one region and why", st.PageableRegions)
	}
	if _, err := Attach(path, AttachOptions{}); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Attach of 8 MiB under a 4 MiB limit: %v", err)
	}
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatalf("Attach with FallbackPageable: %v", err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if len(p.Stats().PageableRegions) != 1 {
		t.Fatalf("the attached process does not report its pageable region")
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
}
