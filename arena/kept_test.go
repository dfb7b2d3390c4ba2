package arena

import (
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/keep"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The kept-range calls as package heap makes them (keep.Of), under the names the tests use.
type Kept = keep.Range

func (a *Arena) Track(k *Kept, addr, size uintptr) error { return keep.Of(a).Track(k, addr, size) }
func (a *Arena) Untrack(k *Kept) bool                    { return keep.Of(a).Untrack(k) }
func (a *Arena) IdleWaits() bool                         { return keep.Of(a).Clock().Waits() }
func (a *Arena) Idle(k *Kept) {
	if keep.Of(a).Clock().Idle(k) {
		keep.Of(a).Start(true)
	}
}
func (a *Arena) IdleNoWait(k *Kept) {
	if keep.Of(a).Clock().Idle(k) {
		keep.Of(a).Start(false)
	}
}

// TestKeptClaimWithinDelay: an idle range claimed back costs no arena call and no provider
// call, and stays committed throughout; Stats reports it as kept while idle.
func TestKeptClaimWithinDelay(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: time.Hour})
	seg, err := a.Alloc(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	var k Kept
	const off, size = 256 << 10, 1 << 20
	if err := a.Track(&k, seg.Base+off, size); err != nil {
		t.Fatal(err)
	}
	if err := a.Track(&k, seg.Base+off, size); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second Track: %v", err)
	}
	before := a.Stats()
	for i := range 1000 {
		a.Idle(&k)
		if i == 0 {
			if st := a.Stats(); st.Kept != size || st.Committed != before.Committed {
				t.Fatalf("idle: Kept %d, Committed %d (was %d)", st.Kept, st.Committed, before.Committed)
			}
		}
		if !k.Claim() {
			t.Fatalf("claim %d: given up within the delay", i)
		}
		mem.Bytes(seg.Base+off, size)[i] = 1 // still committed
	}
	st := a.Stats()
	if st.Kept != 0 || st.Committed != before.Committed || st.Commits != before.Commits ||
		st.Decommits != before.Decommits || st.CommitCalls != before.CommitCalls || st.DecommitCalls != before.DecommitCalls {
		t.Fatalf("claims within the delay reached the arena or the provider:\nbefore %+v\nafter  %+v", before, st)
	}
	if a.Untrack(&k) {
		t.Fatal("Untrack of a busy range reports it given")
	}
	if a.Untrack(&k) {
		t.Fatal("second Untrack reports a range given")
	}
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
}

// TestKeptGivenUpAfterDelay: a range left idle is decommitted by the purge timer after the
// delay, with no call from its holder; Claim then reports it given, and Commit brings it back
// zeroed. Trim gives up an idle range at once, and a busy one not at all.
func TestKeptGivenUpAfterDelay(t *testing.T) {
	const delay = 40 * time.Millisecond
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: delay})
	seg, err := a.Alloc(4<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	var k, busy Kept
	const size = 1 << 20
	for _, x := range []struct {
		k    *Kept
		addr uintptr
	}{{&k, seg.Base}, {&busy, seg.Base + 2<<20}} {
		if err := a.Track(x.k, x.addr, size); err != nil {
			t.Fatal(err)
		}
	}
	mem.Bytes(seg.Base, size)[7] = 7
	committed := a.Stats().Committed
	start := time.Now()
	a.Idle(&k)
	for a.Stats().Kept != 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("idle range not given up 5 s after a delay of %v: %+v", delay, a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("idle range given up after %v, before the delay of %v", d, delay)
	}
	st := a.Stats()
	if st.Committed != committed-size || st.Purged != size {
		t.Fatalf("after the give-up: Committed %d (was %d), Purged %d", st.Committed, committed, st.Purged)
	}
	if k.Claim() {
		t.Fatal("Claim of a given range succeeded")
	}
	zeroed, err := a.Commit(seg.Base, size)
	if err != nil || !zeroed || mem.Bytes(seg.Base, size)[7] != 0 {
		t.Fatalf("Commit after the give-up: zeroed %v, %v", zeroed, err)
	}
	// Trim: the idle range goes at once, the busy one stays.
	a.Idle(&k)
	a.Trim()
	if st := a.Stats(); st.Kept != 0 || st.Committed != committed-size {
		t.Fatalf("after Trim: Kept %d, Committed %d (want %d)", st.Kept, st.Committed, committed-size)
	}
	if !a.Untrack(&k) {
		t.Fatal("Untrack of a range Trim gave up does not report it given")
	}
	if a.Untrack(&busy) {
		t.Fatal("Untrack of a busy range reports it given")
	}
	mem.Bytes(seg.Base+2<<20, size)[0] = 1 // the busy range is still committed
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
}

// TestKeptForcedPurge: a commit refused for want of memory gives up idle ranges, whatever their
// age, before it fails.
func TestKeptForcedPurge(t *testing.T) {
	b := &budgeted{Provider: PageableHost(HostOptions{}), budget: 4 << 20}
	a := newTestArena(t, Options{Provider: b, Capacity: 64 << 20, PurgeDelay: time.Hour})
	seg, err := a.Alloc(3<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	var k Kept
	if err := a.Track(&k, seg.Base, 3<<20); err != nil {
		t.Fatal(err)
	}
	a.Idle(&k)
	more, err := a.Alloc(2<<20, 1) // 3 MiB idle + 2 MiB > 4 MiB
	if err != nil {
		t.Fatalf("Alloc with an idle range to give up: %v", err)
	}
	if st := a.Stats(); st.ForcedPurges != 1 || st.Kept != 0 || st.Committed != 2<<20 {
		t.Fatalf("after the forced purge: %+v", st)
	}
	if !a.Untrack(&k) {
		t.Fatal("the forced purge's range is not reported given")
	}
	for _, s := range []Span{seg, more} {
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeptInvalid: Track refuses a range outside a span in use, and a closed arena.
func TestKeptInvalid(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20})
	seg, err := a.Alloc(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	var k Kept
	if err := a.Track(&k, seg.Base+2<<20, 4096); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Track outside a span in use: %v", err)
	}
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
	if err := a.Track(&k, seg.Base, 4096); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Track in a freed span: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Track(&k, seg.Base, 4096); !errors.Is(err, ErrClosed) {
		t.Fatalf("Track after Close: %v", err)
	}
}

// TestKeptRacesTimer: a holder idles and claims its range in a loop while the purge timer,
// ticking every half millisecond, gives it up whenever it finds it idle long enough. Every
// claim must leave the range committed and wanted: claimed as left, or given up and then
// committed again by the holder. Run with -race.
func TestKeptRacesTimer(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: time.Millisecond})
	seg, err := a.Alloc(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	var k Kept
	const size = 256 << 10
	if err := a.Track(&k, seg.Base, size); err != nil {
		t.Fatal(err)
	}
	given := 0
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		a.Idle(&k)
		if i%64 == 0 {
			// Wait for the timer to give the range up: three ticks of half the delay after the
			// Idle, and timers fire late under -race (a fixed 2 ms sleep missed every time in
			// some runs). The other iterations race the timer.
			for wait := time.Now(); k.Word.Load()&keep.State != uint64(keep.Given) && time.Since(wait) < time.Second; {
				time.Sleep(500 * time.Microsecond)
			}
		}
		if !k.Claim() {
			given++
			if _, err := a.Commit(seg.Base, size); err != nil {
				t.Fatal(err)
			}
		}
		// Busy now: committed and wanted, and the timer leaves it alone.
		a.mu.Lock()
		r := a.regionAt(seg.Base)
		glo, ghi := r.granules(seg.Base, size)
		committed, wanted := r.commit.Count(glo, ghi), r.want.Count(glo, ghi)
		a.mu.Unlock()
		if committed != ghi-glo || wanted != ghi-glo {
			t.Fatalf("claim %d: %d of %d granules committed, %d wanted", i, committed, ghi-glo, wanted)
		}
		mem.Bytes(seg.Base, size)[i%size] = byte(i)
	}
	if given == 0 {
		t.Fatal("the timer never gave the range up")
	}
	if st := a.Stats(); st.Kept != 0 {
		t.Fatalf("Kept %d with the range busy", st.Kept)
	}
	a.Untrack(&k)
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
}
