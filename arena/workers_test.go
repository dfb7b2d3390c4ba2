package arena

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slow wraps a provider: every Commit and Decommit takes delay, and it records how many ran at
// once, which ranges are committed (to check that what the arena records is what the provider
// holds), and fails the commit it is told to.
type slow struct {
	Provider
	splits bool
	delay  time.Duration

	mu              sync.Mutex
	now, most       int
	committed       map[uintptr]bool // granule offsets, by region base + offset
	failAfter       int              // commits to let pass before failing one; -1: none
	refuseAfter     int              // decommits to let pass before refusing one; -1: none
	oom             bool             // the failing commit runs out of memory (ErrExhausted)
	commits, decoms int
}

func newSlow(delay time.Duration, splits bool) *slow {
	return &slow{Provider: PageableHost(HostOptions{}), splits: splits, delay: delay, committed: map[uintptr]bool{}, failAfter: -1, refuseAfter: -1}
}

func (s *slow) Caps() Caps {
	c := s.Provider.Caps()
	c.Splits = s.splits
	return c
}

func (s *slow) enter() {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	time.Sleep(s.delay)
}

func (s *slow) leave() {
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
}

// mostAtOnce returns the most calls that ran at once since it was last called.
func (s *slow) mostAtOnce() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.most
	s.most = 0
	return m
}

func (s *slow) Commit(r *Region, off, size uintptr) error {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	s.commits++
	fail := s.failAfter == 0
	if s.failAfter >= 0 {
		s.failAfter--
	}
	for g := off; g < off+size && !fail; g += s.Provider.Caps().Granule {
		if s.committed[r.Base+g] {
			s.mu.Unlock()
			return fmt.Errorf("%w: %#x committed twice", ErrInvalid, r.Base+g)
		}
	}
	s.mu.Unlock()
	if fail && s.oom {
		return fmt.Errorf("%w: %w", ErrExhausted, errInjected)
	}
	if fail {
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	if err := s.Provider.Commit(r, off, size); err != nil {
		return err
	}
	s.mu.Lock()
	for g := off; g < off+size; g += s.Provider.Caps().Granule {
		s.committed[r.Base+g] = true
	}
	s.mu.Unlock()
	return nil
}

func (s *slow) Decommit(r *Region, off, size uintptr) error {
	s.enter()
	defer s.leave()
	s.mu.Lock()
	refuse := s.refuseAfter == 0
	if s.refuseAfter >= 0 {
		s.refuseAfter--
	}
	s.mu.Unlock()
	if refuse { // the range stays committed, as a refused decommit leaves it
		return fmt.Errorf("%w: decommit refused: %w", ErrCommit, errInjected)
	}
	if err := s.Provider.Decommit(r, off, size); err != nil {
		return err
	}
	s.mu.Lock()
	s.decoms++
	for g := off; g < off+size; g += s.Provider.Caps().Granule {
		delete(s.committed, r.Base+g)
	}
	s.mu.Unlock()
	return nil
}

// held returns the bytes the provider holds committed.
func (s *slow) held() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.committed)) * uint64(s.Provider.Caps().Granule)
}

// TestParallelCommit: a span of 32 MiB commits in pieces on the workers; a failing piece leaves
// nothing committed; the purge decommits in pieces too.
func TestParallelCommit(t *testing.T) {
	p := newSlow(100*time.Millisecond, true)
	a := newTestArena(t, Options{Provider: p, Capacity: 256 << 20, PurgeDelay: -1, CommitWorkers: 4})
	s, err := a.Alloc(32<<20, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.mostAtOnce(); n != 4 {
		t.Errorf("a 32 MiB span committed on %d goroutines at once, want 4", n)
	}
	if st := a.Stats(); st.Committed != 32<<20 || p.held() != 32<<20 || st.CommitWorkers != 4 || st.Commits != 4 {
		t.Errorf("arena committed %d (%d calls, %d workers), provider holds %d", st.Committed, st.Commits, st.CommitWorkers, p.held())
	}
	b := a.mustBytes(t, s)
	b[0], b[len(b)-1] = 1, 2 // committed throughout

	// A piece that fails: the others are given back, and the span's chunks are free again.
	p.mu.Lock()
	p.failAfter = 2
	p.mu.Unlock()
	if _, err := a.Alloc(32<<20, DefaultChunkSize); !errors.Is(err, errInjected) {
		t.Fatalf("Alloc with a failing piece = %v", err)
	}
	if st := a.Stats(); st.Committed != 32<<20 || p.held() != 32<<20 || st.ChunksInUse != 16 {
		t.Errorf("after a failed parallel commit: arena committed %d, chunks in use %d, provider holds %d", st.Committed, st.ChunksInUse, p.held())
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Free(s))
	p.mostAtOnce()
	a.Trim()
	if n := p.mostAtOnce(); n != 4 {
		t.Errorf("Trim decommitted 32 MiB on %d goroutines at once, want 4", n)
	}
	if st := a.Stats(); st.Committed != 0 || p.held() != 0 {
		t.Errorf("after Trim: arena committed %d, provider holds %d", st.Committed, p.held())
	}

	// Small spans, one worker, and providers that do not split commit on the caller alone.
	for _, c := range []struct {
		size    uintptr
		workers int
		splits  bool
	}{{2 << 20, 4, true}, {32 << 20, 1, true}, {32 << 20, 4, false}} {
		q := newSlow(time.Millisecond, c.splits)
		b := newTestArena(t, Options{Provider: q, Capacity: 64 << 20, PurgeDelay: -1, CommitWorkers: c.workers})
		s, err := b.Alloc(c.size, DefaultChunkSize)
		must(err)
		if n := q.mostAtOnce(); n != 1 {
			t.Errorf("%+v: committed on %d goroutines at once, want 1", c, n)
		}
		must(b.Free(s))
	}
	for _, w := range []int{-1, MaxCommitWorkers + 1} {
		if _, err := New(Options{Provider: p, Capacity: 64 << 20, CommitWorkers: w}); !errors.Is(err, ErrInvalid) {
			t.Errorf("CommitWorkers %d = %v, want ErrInvalid", w, err)
		}
	}
}

// TestCommitUndoRefused: a parallel commit whose piece fails gives back what the other pieces
// committed; when the provider refuses to give one of those back, it stays committed, and the
// arena counts it so (committed, unwanted: the purge's), so that a later commit of the range
// does not commit it twice and Trim gives it back. Before, the arena took the refused piece for
// uncommitted: Stats.Committed fell short of what the provider held, and every later Alloc of
// those chunks failed (the provider refuses to commit a granule committed already).
func TestCommitUndoRefused(t *testing.T) {
	for _, c := range []struct {
		name      string
		oom       bool
		precommit bool
	}{{"alloc", false, false}, {"alloc out of memory", true, false}, {"precommit", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			p := newSlow(0, true)
			o := Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1, CommitWorkers: 4}
			if c.precommit {
				o.ChunkSize = 8 << 20 // a batch of one chunk, committed in four pieces
			}
			a := newTestArena(t, o)
			p.mu.Lock()
			p.failAfter, p.refuseAfter, p.oom = 1, 0, c.oom
			p.mu.Unlock()
			var err error
			if c.precommit {
				_, err = a.Precommit(8 << 20)
			} else {
				var s Span
				if s, err = a.Alloc(16<<20, DefaultChunkSize); c.oom {
					// Out of memory, the arena commits the span again one run at a time: the piece
					// the provider kept is committed, the rest is committed now.
					if err != nil {
						t.Fatalf("%s: Alloc whose pieces ran out of memory, the undo refused: %v", c.name, err)
					}
					if err := a.Free(s); err != nil {
						t.Fatal(err)
					}
					err = errInjected
				}
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s: a commit with a failing piece = %v", c.name, err)
			}
			if st := a.Stats(); st.Committed != p.held() || p.held() == 0 {
				t.Errorf("%s: after a failed commit whose undo was refused: arena committed %d, provider holds %d", c.name, st.Committed, p.held())
			}
			s, err := a.Alloc(16<<20, DefaultChunkSize)
			if err != nil {
				t.Fatalf("%s: Alloc after the refused undo: %v", c.name, err)
			}
			if st := a.Stats(); st.Committed != p.held() || p.held() < 16<<20 {
				t.Errorf("%s: after the Alloc: arena committed %d, provider holds %d", c.name, st.Committed, p.held())
			}
			if err := a.Free(s); err != nil {
				t.Fatal(err)
			}
			a.Trim()
			if st := a.Stats(); st.Committed != 0 || p.held() != 0 {
				t.Errorf("%s: after Trim: arena committed %d, provider holds %d", c.name, st.Committed, p.held())
			}
		})
	}
}

// mustBytes views a span of host memory.
func (a *Arena) mustBytes(t *testing.T, s Span) []byte {
	t.Helper()
	b, err := a.Bytes(s.Base, s.Size)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrecommitParallel: Precommit commits its batches on the workers, reports its progress
// through Usage as it goes, and an allocation meanwhile commits what it needs itself.
func TestPrecommitParallel(t *testing.T) {
	p := newSlow(40*time.Millisecond, true)
	a := newTestArena(t, Options{Provider: p, Capacity: 256 << 20, PurgeDelay: -1, CommitWorkers: 4})
	done := make(chan error, 1)
	var n uintptr
	go func() {
		var err error
		n, err = a.Precommit(64 << 20)
		done <- err
	}()
	seen := false
	for i := 0; i < 1000 && !seen; i++ {
		if u := a.Usage(); u.Precommitted > 0 && u.Precommitted < 64<<20 {
			seen = true
		}
		time.Sleep(time.Millisecond)
	}
	if !seen {
		t.Errorf("Usage never showed a precommit under way")
	}
	start := time.Now()
	s, err := a.Alloc(1<<20, 1) // commits its own chunk: one call, not the whole precommit
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Errorf("an Alloc during the precommit took %v", took)
	}
	if err := <-done; err != nil || n != 64<<20 {
		t.Fatalf("Precommit = %d, %v", n, err)
	}
	if m := p.mostAtOnce(); m < 4 {
		t.Errorf("precommit ran %d calls at once, want at least 4", m)
	}
	st := a.Stats()
	if st.Precommitted != 64<<20 || a.Usage().Precommitted != 64<<20 || p.held() != st.Committed || st.Committed < 64<<20 {
		t.Errorf("precommitted %d, committed %d, provider holds %d", st.Precommitted, st.Committed, p.held())
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestAllocWaitsForPrecommitBatch: at capacity, an allocation that finds only chunks Precommit
// holds waits for that batch (not the whole precommit) instead of failing.
func TestAllocWaitsForPrecommitBatch(t *testing.T) {
	p := newSlow(50*time.Millisecond, true)
	a := newTestArena(t, Options{Provider: p, Capacity: 8 << 20, PurgeDelay: -1, CommitWorkers: 2})
	var held atomic.Bool
	go func() {
		for p.mostAtOnceNoReset() == 0 {
			time.Sleep(time.Millisecond)
		}
		held.Store(true)
	}()
	done := make(chan error, 1)
	go func() { _, err := a.Precommit(8 << 20); done <- err }()
	for !held.Load() {
		time.Sleep(time.Millisecond)
	}
	s, err := a.Alloc(4<<20, 1)
	if err != nil {
		t.Fatalf("Alloc at capacity beside a precommit batch: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Precommit: %v", err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

func (s *slow) mostAtOnceNoReset() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

// TestPrecommitFailureKeepsBatch: a chunk whose commit fails is given back whole; the batch's
// other chunks stay committed and counted, and Precommit stops with the error.
func TestPrecommitFailureKeepsBatch(t *testing.T) {
	p := newSlow(time.Millisecond, true)
	p.failAfter = 3
	a := newTestArena(t, Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1, CommitWorkers: 4})
	n, err := a.Precommit(32 << 20)
	if !errors.Is(err, errInjected) {
		t.Fatalf("Precommit = %d, %v; want the injected fault", n, err)
	}
	st := a.Stats()
	if n != 7*DefaultChunkSize || st.Precommitted != uint64(n) || st.Committed != uint64(n) || p.held() != uint64(n) || st.ChunksInUse != 0 {
		t.Errorf("Precommit = %d; precommitted %d, committed %d, provider holds %d, chunks in use %d; want 7 chunks",
			n, st.Precommitted, st.Committed, p.held(), st.ChunksInUse)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 || p.held() != 0 {
		t.Errorf("after Trim: committed %d, provider holds %d", st.Committed, p.held())
	}
}
