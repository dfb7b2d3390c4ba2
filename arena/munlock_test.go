package arena

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// TestDecommitFailsAfterMunlock: a purge whose decommit fails after its munlock succeeded (the
// madvise that drops the pages, made to fail with the provider's madvise seam) leaves the
// memory unlocked, so the arena's committed bytes and the provider's locked bytes drop with
// the kernel's; a later purge does not unlock it twice, and an Alloc there locks it again and
// does not take it to read as zero. Before, the arena kept it committed: counted locked while
// the kernel had unlocked it, handed out again unlocked, and the next purge's munlock took its
// bytes off the provider's count a second time.
func TestDecommitFailsAfterMunlock(t *testing.T) {
	p := LockedHost(HostOptions{})
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, PurgeDelay: -1})
	const size = 1 << 20
	before := memlocktest.Locked(t)
	s, err := a.Alloc(size, 1)
	if err != nil {
		t.Fatal(err)
	}
	mem.Bytes(s.Base, s.Size)[0] = 1
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	p.madviseFn = func(b []byte, advice int) error {
		if advice == unix.MADV_DONTNEED {
			return unix.EAGAIN
		}
		return unix.Madvise(b, advice)
	}
	a.Trim()
	if got := memlocktest.Locked(t); got != before {
		t.Fatalf("%d bytes locked after the purge, %d before", got, before)
	}
	if st, c := a.Stats(), p.Counters(); st.Committed != 0 || c.LockedBytes != 0 {
		t.Fatalf("after a decommit that failed past its munlock: the arena counts %d bytes committed, "+
			"the provider %d locked; the kernel 0", st.Committed, c.LockedBytes)
	}
	p.madviseFn = nil
	a.Trim()
	if c := p.Counters(); c.LockedBytes != 0 {
		t.Fatalf("the provider counts %d bytes locked after the next purge, want 0", c.LockedBytes)
	}
	s, err = a.Alloc(size, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, c := memlocktest.Locked(t), p.Counters(); got != before+size || c.LockedBytes != size {
		t.Fatalf("after the Alloc there: %d bytes locked (%d before), the provider counts %d", got, before, c.LockedBytes)
	}
	if s.Zeroed && mem.Bytes(s.Base, s.Size)[0] != 0 {
		t.Fatal("the span is said to read as zero, and holds what the failed purge left")
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestCommitUndoFailsAfterMunlock: when a commit fails and the arena gives back what the
// commit's other runs locked, a decommit there that fails after its munlock leaves that
// memory unlocked: it is not kept as committed. Before, the arena counted it committed (and
// locked) while the kernel had unlocked it.
func TestCommitUndoFailsAfterMunlock(t *testing.T) {
	p := LockedHost(HostOptions{})
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, PurgeDelay: -1, CommitWorkers: 1})
	const chunk = DefaultChunkSize
	var ss [3]Span
	for i := range ss {
		s, err := a.Alloc(chunk, chunk)
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
	}
	for _, i := range []int{0, 2} {
		if err := a.Free(ss[i]); err != nil {
			t.Fatal(err)
		}
	}
	a.Trim() // chunks 0 and 2 decommitted; chunk 1, in use, stays locked
	if err := a.Free(ss[1]); err != nil {
		t.Fatal(err)
	}
	before := memlocktest.Locked(t)
	third := ss[2].Base
	p.mlockFn = func(b []byte) error {
		if mem.Addr(b) >= third {
			return unix.EINVAL // not for want of memory: no forced purge and second try
		}
		return unix.Mlock(b)
	}
	p.madviseFn = func([]byte, int) error { return unix.EAGAIN }
	if _, err := a.Alloc(3*chunk, chunk); err == nil { // commits chunk 0, fails at chunk 2
		t.Fatal("Alloc with chunk 2's mlock refused succeeded")
	}
	p.mlockFn, p.madviseFn = nil, nil
	if got := memlocktest.Locked(t); got != before {
		t.Fatalf("%d bytes locked after the failed Alloc, %d before", got, before)
	}
	if st, c := a.Stats(), p.Counters(); st.Committed != chunk || c.LockedBytes != chunk {
		t.Fatalf("after the failed Alloc the arena counts %d bytes committed, the provider %d locked; "+
			"the kernel %d (chunk 1)", st.Committed, c.LockedBytes, chunk)
	}
}
