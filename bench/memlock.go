package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// The up-front check of the memlock limit. The suite locks up to suiteLocked bytes at once (the
// huge cases' 2 GiB pool, beside what the Go runtime holds); Debian's default RLIMIT_MEMLOCK for
// an ordinary user is 8 MiB. Rather than let every locked allocation fail (an error per case per
// allocator), the suite decides once: where the limit is too low, pinmalloc runs on pageable
// memory (the same heap and pool over mmap without mlock, labelled "pageable" wherever a figure
// is shown) and the allocators that lock each buffer themselves (mmap+mlock per buffer, the
// PyTorch-style cache) run only the fixed-size cases whose buffer fits the limit.

// suiteLocked is the memory the suite may lock at once: the huge cases' pool, and a margin.
const suiteLocked = hugeCapacity + caseCapacity

// capIPCLock is CAP_IPC_LOCK's bit in /proc/self/status's CapEff: with it, the limit is ignored.
const capIPCLock = 14

// memlockPlan is what the check decided.
type memlockPlan struct {
	limit    uint64 // the soft RLIMIT_MEMLOCK in bytes; unix.RLIM_INFINITY when unlimited
	capable  bool   // CAP_IPC_LOCK held: the limit does not apply
	pageable bool   // pinmalloc runs on pageable memory
	maxPair  int64  // the largest pair case the self-locking allocators run (0: no bound)
}

// hostMemory is this run's plan, decided once in main (checkMemlock) before any allocator is
// opened; its zero value (locked memory, no bound) is what the tests use.
var hostMemory memlockPlan

// checkMemlock reads the limit and CAP_IPC_LOCK and returns the plan.
func checkMemlock() memlockPlan {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return memlockPlan{limit: unix.RLIM_INFINITY} // cannot tell: try, and let errors say
	}
	return planFor(rl.Cur, hasCapIPCLock())
}

// planFor decides from a limit and whether CAP_IPC_LOCK is held.
func planFor(limit uint64, capable bool) memlockPlan {
	p := memlockPlan{limit: limit, capable: capable}
	if capable || limit == unix.RLIM_INFINITY || limit >= suiteLocked {
		return p
	}
	p.pageable = true
	p.maxPair = 1 << 10
	for p.maxPair*8 <= int64(limit) { // a buffer of at most an eighth of the limit: others lock too
		p.maxPair *= 2
	}
	p.maxPair /= 2
	return p
}

// hasCapIPCLock reports whether the process holds CAP_IPC_LOCK (root usually does).
func hasCapIPCLock() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capIPCLock) != 0
		}
	}
	return false
}

// memoryNote labels figures taken on this plan: "" on locked memory.
func (p memlockPlan) memoryNote() string {
	if !p.pageable {
		return ""
	}
	return fmt.Sprintf("pinmalloc on pageable memory (RLIMIT_MEMLOCK %s)", units.Bytes(p.limit))
}

// line is the one line the run prints about the limit.
func (p memlockPlan) line() string {
	switch {
	case p.capable:
		return "bench: memlock: CAP_IPC_LOCK held: every case runs on locked memory"
	case !p.pageable:
		return "bench: memlock: limit " + limitName(p.limit) + ": every case runs on locked memory"
	}
	return fmt.Sprintf("bench: memlock: limit %s (the suite locks up to %s): pinmalloc runs on pageable memory, labelled so; "+
		"mmap+mlock and the PyTorch-style cache run only pairs up to %s. For locked memory: ulimit -l unlimited, or run as root",
		units.Bytes(p.limit), units.Bytes(suiteLocked), units.Bytes(uint64(p.maxPair)))
}

// limitName writes a limit, or "unlimited".
func limitName(l uint64) string {
	if l == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return units.Bytes(l)
}
