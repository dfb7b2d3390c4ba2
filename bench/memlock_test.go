package main

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemlockPlan: at Debian's 8 MiB, pinmalloc runs on pageable memory and the self-locking
// allocators run pairs up to 1 MiB only; with CAP_IPC_LOCK, no limit or a large one, all runs
// locked. The line says which, once.
func TestMemlockPlan(t *testing.T) {
	p := planFor(8<<20, false)
	if !p.pageable || p.maxPair != 1<<20 {
		t.Errorf("8 MiB: %+v, want pageable and pairs up to 1 MiB", p)
	}
	if l := p.line(); !strings.Contains(l, "pageable") || !strings.Contains(l, "8 MiB") || !strings.Contains(l, "1 MiB") || strings.Contains(l, "\n") {
		t.Errorf("8 MiB line %q", l)
	}
	if n := p.memoryNote(); !strings.Contains(n, "pageable") {
		t.Errorf("8 MiB note %q", n)
	}
	for _, q := range []memlockPlan{planFor(8<<20, true), planFor(unix.RLIM_INFINITY, false), planFor(suiteLocked, false)} {
		if q.pageable || q.maxPair != 0 || q.memoryNote() != "" || !strings.Contains(q.line(), "every case runs on locked memory") {
			t.Errorf("%+v: %q, want locked memory everywhere", q, q.line())
		}
	}
}

// TestSelfLockingBounded: under a low limit, mmap+mlock per buffer keeps only the pairs that
// fit, and the case loop gives it no larger pair.
func TestSelfLockingBounded(t *testing.T) {
	defer func(saved memlockPlan) { hostMemory = saved }(hostMemory)
	hostMemory = planFor(8<<20, false)
	im := newPercallMlock()
	if im.mixed != nil || im.prodcons != nil || im.maxPair != 1<<20 {
		t.Fatalf("percall-mlock at 8 MiB: mixed %v, prodcons %v, maxPair %d", im.mixed != nil, im.prodcons != nil, im.maxPair)
	}
	s := &suite{}
	if open, _ := s.workload(benchCase{name: "pair/1MiB", group: "pair", size: 1 << 20}, im); open == nil {
		t.Error("pair/1MiB not run")
	}
	if open, _ := s.workload(benchCase{name: "pair/16MiB", group: "pair", size: 16 << 20}, im); open != nil {
		t.Error("pair/16MiB run at an 8 MiB limit")
	}
}
