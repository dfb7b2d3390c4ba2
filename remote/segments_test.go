package remote

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
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

// TestSegmentSourceMemlock: a SegmentSource that locks (the default) refuses a commit beyond
// the memlock limit with an error matching pinmalloc.ErrMemlock, and the pool stays usable
// and closes. It needs a limit that binds: an ordinary user's (CI's unprivileged run, 8 MiB).
func TestSegmentSourceMemlock(t *testing.T) {
	needUCX(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil || os.Geteuid() == 0 || lim.Cur > 32<<20 {
		t.Skipf("the memlock limit does not bind here (uid %d, limit %d): .ci/unprivileged runs this test at 8 MiB", os.Geteuid(), lim.Cur)
	}
	t.Setenv("UCX_TLS", "sm")
	w := newWorker(t)
	pool, err := pinned.New(pinned.Options{Source: w.SegmentSource(SegmentOptions{}), Capacity: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := pool.Alloc(64 << 20)
	if err == nil {
		_ = pool.Free(b)
		t.Fatalf("64 MiB locked at a memlock limit of %d", lim.Cur)
	}
	if !errors.Is(err, pinmalloc.ErrMemlock) {
		t.Fatalf("Alloc past the memlock limit: %v, want pinmalloc.ErrMemlock", err)
	}
	small, err := pool.Alloc(64 << 10)
	if err != nil {
		t.Fatalf("a small Alloc after the refusal: %v", err)
	}
	if err := pool.Free(small); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentCommitFailsPartway: a segment's Commit whose mlock fails part-way (the first half
// of the range locked for real, then an error) leaves nothing of the range locked. Before, the
// half stayed locked, charged to RLIMIT_MEMLOCK, until UCX freed the segment.
func TestSegmentCommitFailsPartway(t *testing.T) {
	const size = 256 << 10
	b := memlocktest.Anonymous(t, size)
	before := memlocktest.Locked(t)
	mlock = memlocktest.FailPartway(t)
	defer func() { mlock = unix.Mlock }()
	s := &segmentSource{}
	if err := s.Commit(&arena.Region{Base: mem.Addr(b), Size: size}, 0, size); !errors.Is(err, arena.ErrMemlock) {
		t.Fatalf("Commit with mlock failing part-way: %v; want arena.ErrMemlock", err)
	}
	if got := memlocktest.Locked(t); got != before {
		t.Errorf("after the failed commit %d bytes are locked, %d before", got, before)
	}
}
