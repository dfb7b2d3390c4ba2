package pinned

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
	"golang.org/x/sys/unix"
)

// TestMemlockLimit checks the memlock path for real: the test binary runs itself again as an
// unprivileged user (when the test runs as root: no CAP_IPC_LOCK there) with RLIMIT_MEMLOCK
// lowered to 4 MiB (internal/memlocktest). There, locking 8 MiB must fail with ErrMemlock
// naming the limit and how to raise it, and the pool must stay usable.
func TestMemlockLimit(t *testing.T) {
	if memlocktest.Child(t) {
		memlockChild(t)
		return
	}
	out := memlocktest.Run(t, "TestMemlockLimit")
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "memlock error:") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

func memlockChild(t *testing.T) {
	fail := t.Fatalf
	p, err := New(Options{Capacity: 256 << 20, PurgeDelay: -1}) // freed memory stays locked
	if err != nil {
		fail("New: %v", err)
	}
	_, err = p.Alloc(8 << 20)
	if !errors.Is(err, ErrMemlock) {
		fail("Alloc(8 MiB) under a 4 MiB limit: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"4096 KiB", "ulimit -l", "LimitMEMLOCK", "CAP_IPC_LOCK"} {
		if !strings.Contains(msg, want) {
			fail("error does not mention %q: %s", want, msg)
		}
	}
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		fail("the errno is not wrapped: %v", err)
	}
	fmt.Println("memlock error:", msg)
	// Nothing is lost: small buffers (one 2 MiB chunk) still fit under the limit.
	b, err := p.Alloc(4096)
	if err != nil {
		fail("Alloc(4 KiB) after the failure: %v", err)
	}
	if err := p.Free(b); err != nil {
		fail("Free: %v", err)
	}
	// Memory the pool keeps locked for reuse is given back when the limit is reached: 3 MiB
	// freed (kept, still locked) and then 1 MiB of other memory fit under 4 MiB.
	big, err := p.Alloc(3 << 20)
	if err != nil {
		fail("Alloc(3 MiB): %v", err)
	}
	if err := p.Free(big); err != nil {
		fail("Free(3 MiB): %v", err)
	}
	obj, err := p.Alloc(1000 << 10)
	if err != nil {
		fail("Alloc(1000 KiB) with 3 MiB freed but still locked: %v", err)
	}
	if st := p.Stats(); st.ForcedPurges == 0 {
		fail("no forced purge counted: %+v", st)
	}
	if err := p.Free(obj); err != nil {
		fail("Free: %v", err)
	}
	if err := p.Close(); err != nil {
		fail("Close: %v", err)
	}
}

// lockable reports whether this process may lock n more bytes: it has CAP_IPC_LOCK, or its
// RLIMIT_MEMLOCK soft limit leaves room for n beyond what it has locked already. It also returns
// the soft limit in KiB, for messages (-1: unlimited).
func lockable(n uint64) (ok bool, limitKiB int64) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return true, -1
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return lim.Cur >= n, int64(lim.Cur >> 10)
	}
	var locked uint64
	for _, line := range strings.Split(string(status), "\n") {
		var capEff uint64
		if _, err := fmt.Sscanf(line, "CapEff: %x", &capEff); err == nil && capEff&(1<<unix.CAP_IPC_LOCK) != 0 {
			return true, int64(lim.Cur >> 10)
		}
		var kib uint64
		if _, err := fmt.Sscanf(line, "VmLck: %d kB", &kib); err == nil {
			locked = kib << 10
		}
	}
	return lim.Cur >= locked && lim.Cur-locked >= n, int64(lim.Cur >> 10)
}

// lockedIfRoom returns the Locked backend when the process may lock n more bytes, and Pageable
// otherwise: for tests of what does not depend on locking (concurrency, reuse), so that they run
// under Debian's default 8 MiB limit too.
func lockedIfRoom(n uint64) Backend {
	if ok, _ := lockable(n); ok {
		return Locked
	}
	return Pageable
}
