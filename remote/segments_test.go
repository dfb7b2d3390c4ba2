package remote

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestSegmentSourceLifecycle: a pool of a SegmentSource has one UCX allocation per region,
// which its registration reuses (no ucp_mem_map of its own); the pool outlives the worker's
// Close (UCX's context stays until the last segment is freed, then goes); a closed worker's
// source allocates nothing.
func TestSegmentSourceLifecycle(t *testing.T) {
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	w, err := New(Options{SharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	src := w.SegmentSource(SegmentOptions{})
	maps := ucx.MemMaps()
	pool, err := testPool(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	fill(b, 7)
	reg, err := w.Register(pool)
	if err != nil {
		t.Fatal(err)
	}
	if got := ucx.MemMaps() - maps; got != 1 || src.(*segmentSource).Regions() != 1 || reg.Regions() != 1 {
		t.Fatalf("%d ucp_mem_map calls, %d segments, %d regions registered: want 1 of each", got, src.(*segmentSource).Regions(), reg.Regions())
	}
	mp, ok := findMapping(mem.Addr(b))
	if !ok || !mp.sysv() || !w.selfSysV[mp.inode] {
		t.Fatalf("the pool's buffer lies in %+v, not a SysV segment of the worker's", mp)
	}
	if _, err := reg.Describe(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	check(t, "the pool's buffer after the worker's Close", b, 7)
	w.mu.Lock()
	ctxClosed := w.ctxClosed
	w.mu.Unlock()
	if ctxClosed {
		t.Fatal("UCX's context was destroyed under a live segment")
	}
	if err := errors.Join(pool.Free(b), pool.Close()); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	ctxClosed, segs := w.ctxClosed, w.segments
	w.mu.Unlock()
	if !ctxClosed || segs != 0 || src.(*segmentSource).Regions() != 0 {
		t.Fatalf("after the pool's Close: context destroyed %v, %d segments left, %d in the source", ctxClosed, segs, src.(*segmentSource).Regions())
	}
	// A closed worker's source allocates nothing.
	p2, err := pinned.New(pinned.Options{Source: src, Capacity: 64 << 20})
	if err == nil {
		_, err = p2.Alloc(4096)
		_ = p2.Close()
	}
	if !errors.Is(err, arena.ErrReserve) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a pool of a closed worker's source: %v, want arena.ErrReserve saying the worker is closed", err)
	}
}
