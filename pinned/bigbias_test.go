package pinned

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// biasedPool returns a coarse pool with fast sections, its big shard made and held by no one,
// and home shards for slots 0 to 3 (Options.Shards 4): on a machine of 2 Ps slots 2 and 3
// are no running P's, so a test can give the bias to a P no goroutine of it runs on.
func biasedPool(t *testing.T) (*Pool, *shard) {
	t.Helper()
	procs := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	o := coarseOptions()
	o.Shards = 4
	p := newTestPool(t, o)
	if !p.fast || !p.big.fast {
		t.Skip("no fast sections in this build (race detector, pinmalloc_noprocpin, no membarrier)")
	}
	for i := range 4 {
		if s, _ := p.newShard(i); s != nil {
			letGo(s)
		}
	}
	s, _ := p.newShard(slotBig)
	if s == nil {
		t.Fatal("no big shard")
	}
	letGo(s)
	t.Cleanup(func() { // before Close, which would wait for a section a failed test left
		for i := range 4 {
			atomic.StoreUint32(&p.home[i].Load().bigInside, 0)
		}
	})
	return p, s
}

// TestBigShardSectionRules: a fast section of the big shard starts only on the P it is
// biased to, and not while a holder has revoked it; one that does not start leaves its flag
// clear.
func TestBigShardSectionRules(t *testing.T) {
	p, s := biasedPool(t)
	b := &p.big
	flag := &p.home[3].Load().bigInside
	if b.enter(s, 3) != nil || *flag != 0 {
		t.Fatal("a section started with no bias")
	}
	b.bias.Store(4) // P 3's
	if b.enter(s, 2) != nil {
		t.Fatal("a section started on P 2 with the bias P 3's")
	}
	s.revoked.Add(1)
	if b.enter(s, 3) != nil || *flag != 0 {
		t.Fatalf("a section started while revoked (flag %d)", *flag)
	}
	s.revoked.Add(-1)
	if hs := b.enter(s, 3); hs != p.home[3].Load() || *flag != 1 {
		t.Fatalf("no section on the biased P (flag %d)", *flag)
	}
	*flag = 0
	b.bias.Store(0)
}

// TestBigShardTakeWaitsOutSection: a goroutine of another P than the biased one that takes the
// big shard clears the bias and waits for the section under way on that P to end before it
// holds; one on the biased P keeps the bias and waits for nothing (no section of its P can be
// under way), but stops the next ones.
func TestBigShardTakeWaitsOutSection(t *testing.T) {
	p, s := biasedPool(t)
	b := &p.big
	flag := &p.home[3].Load().bigInside
	b.bias.Store(4) // P 3's, which runs no goroutine: its section stays under way
	atomic.StoreUint32(flag, 1)
	took := make(chan bool, 1)
	go func() { took <- s.tryLock() }()
	select {
	case ok := <-took:
		if ok {
			letGo(s)
		}
		t.Fatal("the big shard was held while the biased P's section was under way")
	case <-time.After(50 * time.Millisecond):
	}
	atomic.StoreUint32(flag, 0) // the section ends
	if !<-took {
		t.Fatal("tryLock failed with the mutex free")
	}
	if v := b.bias.Load(); v != 0 {
		t.Errorf("the bias is %d after another P took the big shard; want 0 (none)", v)
	}
	if b.enter(s, 3) != nil {
		t.Error("a section started while the big shard was held")
	}
	letGo(s)

	b.bias.Store(4) // a hold (Stats, Trim, the purger) waits for the section too, and keeps the bias
	atomic.StoreUint32(flag, 1)
	go func() { p.hold([]*shard{s}); took <- true }()
	select {
	case <-took:
		letGo(s)
		t.Fatal("a hold of the big shard ended while the biased P's section was under way")
	case <-time.After(50 * time.Millisecond):
	}
	atomic.StoreUint32(flag, 0)
	<-took
	if v := b.bias.Load(); v != 4 {
		t.Errorf("the bias is %d after a hold; want 4, kept", v)
	}
	letGo(s)
	if ok, held := b.lockAlone(s, 0); ok || held { // past lockFast's first look at the bias
		if ok {
			s.mu.Unlock()
		}
		t.Errorf("a fast path of P 0 took the mutex alone (%v) or found it held (%v), with the bias P 3's", ok, held)
	}

	i := procpin.Pin()
	b.bias.Store(int32(i + 1))
	ok := s.tryLock() // pinned: the caller runs on the biased P
	procpin.Unpin()
	if !ok || b.bias.Load() != int32(i+1) {
		t.Errorf("a take on the biased P: held %v, bias %d; want held, bias %d kept", ok, b.bias.Load(), i+1)
	}
	if b.enter(s, i) != nil {
		t.Error("a section started while the big shard was held")
	}
	letGo(s)
	b.bias.Store(0)
}

// TestBigShardEarnsBias: one goroutine's large pairs give its P the bias after biasAfter
// takes of the mutex, and then run in sections that take no mutex (the streak stops
// counting); a take from a goroutine of another P clears it, and the pairs earn it again.
func TestBigShardEarnsBias(t *testing.T) {
	p, s := biasedPool(t)
	b := &p.big
	pairs := func(k int) {
		for range k {
			buf, err := p.Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			buf[0], buf[len(buf)-1] = 1, 2
			if err := p.Free(buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The goroutine may move to the other P meanwhile, which takes the bias back: try a few
	// windows.
	for try := 0; ; try++ {
		pairs(4 * biasAfter)
		v := b.bias.Load()
		s.mu.Lock() // the streak is the mutex's
		streak := b.streak
		s.mu.Unlock()
		pairs(1000)
		s.mu.Lock()
		after := b.streak
		s.mu.Unlock()
		if v != 0 && b.bias.Load() == v && after == streak {
			break // biased, and 1000 pairs took no mutex
		}
		if try == 20 {
			t.Fatalf("no window of 1000 pairs ran in sections: bias %d, streak %d then %d", v, streak, after)
		}
	}
	v := b.bias.Load()
	p.hold([]*shard{s}) // Stats, Trim, the purger: a hold keeps the bias
	if b.bias.Load() != v {
		t.Error("a hold cleared the bias")
	}
	b.bias.Store(0) // as a take from another P leaves it
	b.last, b.streak = -1, 0
	letGo(s)
	for try := 0; b.bias.Load() == 0; try++ {
		if try == 20 {
			t.Fatal("the pairs did not earn the bias again")
		}
		pairs(4 * biasAfter)
	}
}

// TestBigShardBiasRace: goroutines on every P make and check large and small buffers, each a
// while on its own (its P earns the bias) and then all at once (other Ps take it back), while
// another holds every shard now and then (Stats, Trim) and one lends class pages: every byte
// of every buffer is checked before it is freed, and the bias changes hands many times.
func TestBigShardBiasRace(t *testing.T) {
	p, _ := biasedPool(t)
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		changes atomic.Int32
		turn    sync.Mutex // a goroutine alone for a while: its P earns the bias
	)
	wg.Add(1)
	go func() { // counts the bias's changes
		defer wg.Done()
		last := p.big.bias.Load()
		for !stop.Load() {
			if v := p.big.bias.Load(); v != last {
				changes.Add(1)
				last = v
			}
			runtime.Gosched()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			_ = p.Stats()
			if err := p.Trim(); err != nil {
				t.Error(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	const workers = 4
	var done sync.WaitGroup
	for g := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			type buf struct {
				b    []byte
				seed byte
			}
			var live []buf
			check := func(x buf) {
				for i, c := range x.b {
					if c != x.seed+byte(i) {
						t.Errorf("a buffer of %d bytes changed at %d: %d, want %d", len(x.b), i, c, x.seed+byte(i))
						return
					}
				}
			}
			step := func() {
				if len(live) > 8 || len(live) > 0 && r.IntN(2) == 0 {
					k := r.IntN(len(live))
					check(live[k])
					if err := p.Free(live[k].b); err != nil {
						t.Error(err)
					}
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					return
				}
				n := 64<<10 + 1 + r.IntN(192<<10)
				if r.IntN(4) == 0 {
					n = 16 + r.IntN(16<<10) // a class page now and then: the lending
				}
				b, err := p.Alloc(n)
				if err != nil {
					t.Error(err)
					return
				}
				x := buf{b, byte(r.Uint32())}
				for i := range b {
					b[i] = x.seed + byte(i)
				}
				live = append(live, x)
			}
			for round := 0; round < 16 && !t.Failed(); round++ {
				if round%2 == 0 {
					turn.Lock()
					for range 3 * biasAfter {
						step()
					}
					turn.Unlock()
				} else {
					for range 300 {
						step()
					}
				}
			}
			for _, x := range live {
				check(x)
				if err := p.Free(x.b); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	done.Wait()
	stop.Store(true)
	wg.Wait()
	t.Logf("the bias changed %d times", changes.Load())
	if c := changes.Load(); c < 4 {
		t.Errorf("the bias changed %d times; the test wants it to change hands", c)
	}
	if err := p.Trim(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Committed != 0 {
		t.Errorf("nothing live, after Trim: %d bytes committed", st.Committed)
	}
}
