package arena

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// TestMlockFailsPartway: a commit whose mlock fails partway (the kernel's mlock marks the range
// locked and faults pages in one by one, and a page it cannot fault in ends it with the pages
// before it still locked, charged to RLIMIT_MEMLOCK) leaves nothing of the range locked: the
// failure path unlocks the whole range. The failure is made with the provider's mlock seam,
// which locks the first half of the range for real and fails. Before, the commit returned
// ErrMemlock with half the range still locked, for good: no Decommit follows a failed Commit.
func TestMlockFailsPartway(t *testing.T) {
	p := LockedHost(HostOptions{})
	const size = 256 << 10
	r, err := p.Reserve(size, p.page)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(r)
	before := memlocktest.Locked(t)
	p.mlockFn = memlocktest.FailPartway(t)
	if err := p.Commit(r, 0, size); !errors.Is(err, ErrMemlock) {
		t.Fatalf("Commit with mlock failing partway: %v; want ErrMemlock", err)
	}
	if got := memlocktest.Locked(t); got != before {
		t.Errorf("after the failed commit %d bytes are locked, %d before: %d bytes of the range stay locked", got, before, got-before)
	}
	if c := p.Counters(); c.LockedBytes != 0 {
		t.Errorf("the provider counts %d bytes locked after the failed commit", c.LockedBytes)
	}
}
