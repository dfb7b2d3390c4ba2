package pinned

import (
	"encoding/binary"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/probe"
)

// TestFastSectionTakesNoLock checks, on one P, that an Alloc and a Free take the home shard's
// fast path without its mutex, and that an Alloc waits for a held shard, then takes it (it
// took a spill shard at once before: ownSlow says why no longer), or takes a spill shard when
// the wait is over. The idle purger is off: a tick that finds the shard quiet revokes it and
// waits for the mutex the test holds.
func TestFastSectionTakesNoLock(t *testing.T) {
	if !fastPaths() {
		t.Skip("no fast sections in this build (race detector, pinmalloc_noprocpin, or no membarrier)")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newTestPool(t, Options{Backend: Pageable, PurgeDelay: -1})
	if !p.fast {
		t.Fatal("a pool with a home slot for every P has no fast sections")
	}
	first, err := p.Alloc(100) // makes the home shard's page
	if err != nil {
		t.Fatal(err)
	}
	s := p.home[0].Load()
	s.mu.Lock() // a lock alone does not stop fast sections: only revoked does
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := p.g.Owner(mem.Addr(b)); h != s.h {
		t.Errorf("Alloc with the home shard's mutex taken came from heap %d, not the home shard's", h.Index())
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()

	defer func(w time.Duration) { homeWait = w }(homeWait)
	homeWait = time.Minute
	p.hold([]*shard{s})
	got := make(chan []byte, 1)
	go func() {
		b, err := p.Alloc(100)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case <-got:
		t.Fatal("Alloc did not wait for its P's held shard")
	case <-time.After(50 * time.Millisecond):
	}
	letGo(s)
	if b = <-got; b == nil {
		return
	}
	if h, _ := p.g.Owner(mem.Addr(b)); h != s.h {
		t.Errorf("Alloc after the hold came from heap %d, not the home shard's", h.Index())
	}
	homeWait = time.Millisecond
	p.hold([]*shard{s})
	spilled, err := p.Alloc(100) // waits a millisecond, then takes a spill shard
	letGo(s)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := p.g.Owner(mem.Addr(spilled)); h == s.h {
		t.Error("Alloc took a held shard")
	}
	if err := p.Free(spilled); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{b, first} {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHoldWaitsForFastSection checks that a hold does not complete while a fast section is
// under way on the shard, and completes when it ends.
func TestHoldWaitsForFastSection(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable})
	s := (*p.shards.Load())[0]
	atomic.StoreUint32(&s.inside, 1) // as a fast section that had entered before the revocation
	held := make(chan struct{})
	go func() {
		p.hold([]*shard{s})
		close(held)
	}()
	select {
	case <-held:
		t.Fatal("hold completed while a fast section was under way")
	case <-time.After(50 * time.Millisecond):
	}
	if s.revoked.Load() == 0 {
		t.Fatal("hold waits without revoking the shard: fast sections would still start")
	}
	atomic.StoreUint32(&s.inside, 0)
	<-held
	letGo(s)
	if s.revoked.Load() != 0 {
		t.Fatalf("revoked %d after the hold ended", s.revoked.Load())
	}
}

// TestWaitHomeWaitsForFastSection checks that a goroutine that waited for its home shard's
// mutex, and runs on another P once it has it, revokes the shard and waits out the fast section
// under way before it holds the shard: only on the shard's own P can none be under way. (The
// slot it passes is one no P has, so that the test does not depend on where it runs.) Then
// that a wait longer than homeWait ends with nothing held and nothing revoked.
func TestWaitHomeWaitsForFastSection(t *testing.T) {
	if !fastPaths() {
		t.Skip("no fast sections in this build (race detector, pinmalloc_noprocpin, or no membarrier)")
	}
	defer func(w time.Duration) { homeWait = w }(homeWait)
	homeWait = time.Minute
	p := newTestPool(t, Options{Backend: Pageable})
	s := (*p.shards.Load())[0]
	s.mu.Lock()                      // another holder
	atomic.StoreUint32(&s.inside, 1) // a fast section under way on the shard's P
	held := make(chan struct{})
	go func() {
		if !p.waitHome(s, len(p.home)) { // its P is not the shard's
			t.Error("waitHome gave up within a minute")
		}
		close(held)
	}()
	time.Sleep(20 * time.Millisecond)
	s.mu.Unlock()
	early := false
	select {
	case <-held:
		early = true
	case <-time.After(50 * time.Millisecond):
	}
	revoked := s.revoked.Load()
	atomic.StoreUint32(&s.inside, 0)
	<-held
	letGo(s)
	if early {
		t.Fatal("waitHome held the shard while a fast section was under way")
	}
	if revoked == 0 {
		t.Fatal("waitHome waits without revoking the shard: fast sections would still start")
	}
	if s.revoked.Load() != 0 {
		t.Fatalf("revoked %d after the hold ended", s.revoked.Load())
	}

	homeWait = time.Millisecond
	s.mu.Lock()
	defer s.mu.Unlock()
	t0 := time.Now()
	done := make(chan bool, 1)
	go func() { done <- p.waitHome(s, 0) }()
	select {
	case ok := <-done:
		if waited, revoked := time.Since(t0), s.revoked.Load(); ok || revoked != 0 || waited < homeWait {
			t.Fatalf("waitHome of a shard held throughout: %v after %v, revoked %d; want false after %v, 0", ok, waited, revoked, homeWait)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waitHome of a shard held throughout still waits after 5 s; homeWait is %v", homeWait)
	}
}

// TestMaintenanceRacesFastSections runs Alloc and Free on more goroutines than CPUs, each
// stamping its buffers and checking the stamp before freeing (and freeing a third of them on
// another goroutine), while another goroutine calls Stats, Usage, Trim and Blocks in a loop:
// every holder must wait out the fast sections, or a buffer changes under its owner or the
// counts go wrong. 20,000 steps a worker, 200,000 in the long form, 5,000 under the race
// detector (the maintenance loop still runs through the workers' sections thousands of times).
func TestMaintenanceRacesFastSections(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.NumCPU())))
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 256 << 20})
	steps := 20_000
	switch {
	case longRun():
		steps = 200_000
	case raceEnabled:
		steps = 5_000
	}
	stop := make(chan struct{})
	var maint sync.WaitGroup
	maint.Add(1)
	go func() {
		defer maint.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 4 {
			case 0:
				if st := p.Stats(); st.Live > uint64(8*steps) {
					t.Errorf("Stats: %d live", st.Live)
				}
			case 1:
				p.Usage()
			case 2:
				p.Trim()
			default:
				_ = p.Blocks()
			}
		}
	}()
	handoff := make(chan []byte, 64)
	var workers, freers sync.WaitGroup
	freers.Add(1)
	go func() {
		defer freers.Done()
		for b := range handoff {
			if err := checkStamp(b); err != "" {
				t.Error(err)
			}
			if err := p.Free(b); err != nil {
				t.Error(err)
			}
		}
	}()
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			var live [][]byte
			for i := range steps {
				if len(live) < 32 && i%3 != 2 {
					b, err := p.Alloc(1 + (i*131+w*7)%(16<<10))
					if err != nil {
						t.Error(err)
						return
					}
					stamp(b, byte(i))
					live = append(live, b)
					continue
				}
				if len(live) == 0 {
					continue
				}
				b := live[len(live)-1]
				live = live[:len(live)-1]
				if i%3 == 0 {
					handoff <- b
					continue
				}
				if err := checkStamp(b); err != "" {
					t.Error(err)
					return
				}
				if err := p.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
			for _, b := range live {
				if err := p.Free(b); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	workers.Wait()
	close(handoff)
	freers.Wait()
	close(stop)
	maint.Wait()
	if st := p.Stats(); st.Live != 0 || st.InUse != 0 {
		t.Fatalf("every buffer freed, but %d live (%d bytes)", st.Live, st.InUse)
	}
}

// stamp fills b with a pattern that starts at v, 8 bytes at a time; checkStamp says if b lost
// it.
func stamp(b []byte, v byte) {
	b[0] = v
	i := 1
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], stampWord(v, i))
	}
	for ; i < len(b); i++ {
		b[i] = byte(stampWord(v, i))
	}
}

func checkStamp(b []byte) string {
	probe.Pause()
	v, i := b[0], 1
	for ; i+8 <= len(b); i += 8 {
		if x := binary.LittleEndian.Uint64(b[i:]) ^ stampWord(v, i); x != 0 {
			return sprintf("buffer of %d bytes changed at byte %d", len(b), i+bits.TrailingZeros64(x)/8)
		}
	}
	for ; i < len(b); i++ {
		if b[i] != byte(stampWord(v, i)) {
			return sprintf("buffer of %d bytes changed at byte %d", len(b), i)
		}
	}
	return ""
}

// stampWord is the stamp that starts at v at byte i.
func stampWord(v byte, i int) uint64 {
	return (uint64(v)+1)*0x9e3779b97f4a7c15 ^ uint64(i)*0xbf58476d1ce4e5b9
}

// TestShardSize: a shard is a whole number of cache lines, and a size Go's allocator keeps a
// size class of (so that shards allocated one after another never share a line).
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Errorf("a shard is %d bytes; want 128 (adjust shardPad)", n)
	}
}
