package pinned

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

var soakTime = flag.Duration("soak", 0, "how long TestSoak runs (go test ./pinned -run Soak -soak 2m); default 1s, 5s in the long form (PINMALLOC_LONG=1)")

// soakWorkers is the number of goroutines that allocate and free in each generation; one more
// closes the pool while they run.
const soakWorkers = 6

// TestSoak is an adversarial soak: generation after generation, a pool with random options is
// made, goroutines allocate, write, check and free buffers mixed with every misuse (bad sizes
// and alignments, double frees, sub-slices, Go slices, frees after Close), Trim and Stats, and
// a goroutine closes the pool while they run. Every error must be a sentinel of this package,
// no buffer may change under its owner, and when the last buffer of a generation is freed the
// pool must hold nothing: no address space, no committed or locked memory.
//
// Each worker asks only for sizes congruent to its index modulo soakWorkers, so a buffer it
// freed can only be live again with the same size in its own hands: its deliberate double
// frees never free another worker's buffer (which no allocator could tell from a valid free).
func TestSoak(t *testing.T) {
	soak := *soakTime
	switch {
	case soak > 0:
	case longRun():
		soak = 5 * time.Second
	default:
		soak = time.Second
	}
	deadline := time.Now().Add(soak)
	var gens, ops, misuses int
	for gen := 0; time.Now().Before(deadline) || gen == 0; gen++ {
		o, desc := soakOptions(uint64(gen))
		p, err := New(o)
		if err != nil {
			t.Fatalf("generation %d (%s): New: %v", gen, desc, err)
		}
		genEnd := time.Now().Add(time.Duration(50+gen%7*30) * time.Millisecond)
		var wg sync.WaitGroup
		results := make([]soakResult, soakWorkers)
		for w := range soakWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[w] = soakWorker(p, w, uint64(gen), genEnd)
			}()
		}
		closeErr := make(chan error, 1)
		go func() {
			time.Sleep(time.Until(genEnd) - 10*time.Millisecond) // while the workers still run
			closeErr <- p.Close()
		}()
		wg.Wait()
		cerr := <-closeErr
		for w, r := range results {
			if r.fail != "" {
				t.Fatalf("generation %d (%s), worker %d: %s", gen, desc, w, r.fail)
			}
			ops += r.ops
			misuses += r.misuses
		}
		if cerr != nil && !errors.Is(cerr, ErrLiveBlocks) {
			t.Fatalf("generation %d (%s): Close: %v", gen, desc, cerr)
		}
		st := p.Stats()
		if st.Reserved != 0 || st.Committed != 0 || st.Locked != 0 || st.Live != 0 {
			t.Fatalf("generation %d (%s): every buffer freed after Close (%v), but the pool holds %+v", gen, desc, cerr, st)
		}
		if p.host != nil {
			if c := p.host.Counters(); c.LockedBytes != 0 {
				t.Fatalf("generation %d (%s): %d bytes still locked", gen, desc, c.LockedBytes)
			}
		}
		if err := p.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("generation %d: second Close: %v", gen, err)
		}
		gens++
	}
	t.Logf("%d generations, %d operations, %d misuses refused", gens, ops, misuses)
}

// soakOptions picks a pool's options for generation gen.
func soakOptions(gen uint64) (Options, string) {
	r := rand.New(rand.NewPCG(gen, 17))
	o := Options{
		Capacity:   int(int64(16+r.IntN(4)*16) << 20),
		Backend:    Pageable,
		Shards:     r.IntN(5),
		ZeroOnFree: r.IntN(2) == 0,
		PurgeDelay: []time.Duration{0, -1, time.Millisecond}[r.IntN(3)],
		Align:      []int{0, 16, 256, 4096}[r.IntN(4)],
	}
	if r.IntN(2) == 0 {
		o.Quota = int(int64(1+r.IntN(8)) << 20)
	}
	if ok, _ := lockable(uint64(o.Capacity)); ok && r.IntN(2) == 0 {
		o.Backend = Locked
	}
	return o, strings.Join([]string{o.Backend.String(), sizeName(int64(o.Capacity)), "quota " + sizeName(int64(o.Quota)),
		map[bool]string{true: "zero-on-free", false: "no scrub"}[o.ZeroOnFree]}, ", ")
}

func sizeName(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

type soakResult struct {
	ops, misuses int
	fail         string
}

// soakWorker runs one worker's random operations until end, then frees what it holds.
func soakWorker(p *Pool, w int, gen uint64, end time.Time) (res soakResult) {
	r := rand.New(rand.NewPCG(gen, uint64(w)))
	var live, freed [][]byte
	stamp := byte(w + 1)
	fail := func(format string, args ...any) soakResult {
		res.fail = sprintf(format, args...)
		return res
	}
	// size returns a size congruent to w modulo soakWorkers, of every kind the heap has.
	size := func() int {
		var n int
		switch k := r.IntN(100); {
		case k < 70:
			n = 1 + r.IntN(8<<10)
		case k < 90:
			n = 8<<10 + r.IntN(248<<10)
		case k < 97:
			n = 256<<10 + r.IntN(768<<10)
		default:
			n = 1<<20 + r.IntN(3<<20)
		}
		return n - n%soakWorkers + w + soakWorkers
	}
	// check accepts err when it wraps one of want, all of them sentinels of this package.
	check := func(what string, err error, want ...error) string {
		if err == nil {
			return what + ": no error"
		}
		if !ours(err) || !strings.HasPrefix(err.Error(), "pinned: ") {
			return what + ": not an error of package pinned: " + err.Error()
		}
		for _, s := range want {
			if errors.Is(err, s) {
				return ""
			}
		}
		return what + ": unexpected error: " + err.Error()
	}
	free := func(i int) string {
		b := live[i]
		if b[0] != stamp || b[len(b)-1] != stamp {
			return sprintf("buffer of %d bytes at %#x changed under its owner", len(b), mem.Addr(b))
		}
		if err := p.Free(b); err != nil {
			return sprintf("Free of a live buffer: %v", err)
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		freed = append(freed, b)
		if len(freed) > 64 {
			freed = freed[1:]
		}
		return ""
	}
	closed := false
	for time.Now().Before(end) || (!closed && len(live) > 0 && r.IntN(4) != 0) {
		res.ops++
		switch k := r.IntN(100); {
		case k < 45: // allocate
			n := size()
			var b []byte
			var err error
			if r.IntN(8) == 0 {
				b, err = p.AllocAligned(n, 1<<(4+r.IntN(20)))
			} else {
				b, err = p.Alloc(n)
			}
			if err != nil {
				if msg := check("Alloc", err, ErrClosed, ErrQuota, ErrOutOfMemory, ErrMemlock); msg != "" {
					return fail("%s (%d bytes)", msg, n)
				}
				closed = closed || errors.Is(err, ErrClosed)
				continue
			}
			if len(b) != n || cap(b) != n {
				return fail("Alloc(%d) returned len %d cap %d", n, len(b), cap(b))
			}
			b[0], b[n-1] = stamp, stamp
			live = append(live, b)
		case k < 80: // free
			if len(live) > 0 {
				if msg := free(r.IntN(len(live))); msg != "" {
					return fail("%s", msg)
				}
			}
		case k < 97: // misuse
			res.misuses++
			if msg := soakMisuse(p, r, live, freed, check); msg != "" {
				return fail("%s", msg)
			}
		case k < 98:
			p.Trim()
		default:
			if st := p.Stats(); st.Live > 1<<40 {
				return fail("absurd stats %+v", st)
			}
		}
	}
	for len(live) > 0 {
		if msg := free(len(live) - 1); msg != "" {
			return fail("%s", msg)
		}
	}
	// Frees after Close, of buffers already freed: refused, with a sentinel. Before this worker
	// saw the pool closed, another may still reallocate the memory: a stale free racing that
	// is what the race detector rightly reports (case 5 of soakMisuse), so not under -race.
	for _, b := range freed[max(0, len(freed)-4):] {
		if raceEnabled && !closed {
			break
		}
		if msg := check("Free after Close", p.Free(b), ErrClosed, ErrDoubleFree, ErrSubSlice, ErrNotOwned); msg != "" && !reallocated(b, live) {
			return fail("%s", msg)
		}
	}
	return res
}

// soakMisuse makes one mistake at random and checks that it is refused with the right sentinel
// and changes nothing.
func soakMisuse(p *Pool, r *rand.Rand, live, freed [][]byte, check func(string, error, ...error) string) string {
	switch r.IntN(7) {
	case 0:
		n := []int{0, -1, -1 << 40, 1 << 62, int(p.a.Capacity()) + 1}[r.IntN(5)]
		_, err := p.Alloc(n)
		return check("Alloc(bad size)", err, ErrInvalidSize, ErrTooLarge, ErrClosed, ErrQuota)
	case 1:
		a := []int{0, -8, 3, 96, 1 << 40}[r.IntN(5)]
		_, err := p.AllocAligned(64, a)
		return check("AllocAligned(bad alignment)", err, ErrInvalidAlign, ErrTooLarge, ErrClosed, ErrQuota)
	case 2:
		if len(live) > 0 {
			b := live[r.IntN(len(live))]
			subs := [][]byte{b[: len(b)-1 : len(b)-1]} // a capacity cut: not a buffer resliced from its start
			if len(b) > 1 {
				subs = append(subs, b[1:])
			}
			return check("Free(sub-slice)", p.Free(subs[r.IntN(len(subs))]), ErrSubSlice, ErrNotOwned)
		}
	case 3:
		return check("Free(Go slice)", p.Free(make([]byte, 1+r.IntN(4096))), ErrNotOwned, ErrClosed)
	case 4:
		return check("Free(nil)", p.Free(nil), ErrNotOwned)
	case 5:
		// A stale free racing another goroutine's reallocation of the block is a bug the race
		// detector reports (heap's freedRemote), as it should: not made under -race.
		if len(freed) > 0 && !raceEnabled {
			b := freed[r.IntN(len(freed))]
			if reallocated(b, live) {
				return "" // live again in our own hands: freeing it would be a valid free
			}
			return check("double Free", p.Free(b), ErrDoubleFree, ErrSubSlice, ErrNotOwned, ErrClosed)
		}
	case 6:
		p.Trim()
	}
	return ""
}

// reallocated reports whether b's memory is the start of one of live.
func reallocated(b []byte, live [][]byte) bool {
	for _, l := range live {
		if mem.Addr(l) == mem.Addr(b) {
			return true
		}
	}
	return false
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
