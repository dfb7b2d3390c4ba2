package heap

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestTryFreeRemoteIsForeign checks that the non-blocking remote free (TryFree, TryFreeHeld
// of another heap's block: pinned's Free on another P) counts itself among the group's
// foreign changes, as the blocking one does: it moves a state word, then sets a remote bit,
// and a walk of the owner's invariants between the two sees a block lost. So the owner's
// verifyQuiet, run over and over while another heap's owner TryFrees its blocks, must never
// return an error.
func TestTryFreeRemoteIsForeign(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the group counts foreign changes only with invariants.Enabled (-race, -tags invariants)")
	}
	h := newTestHeap(t, 256<<20, Options{})
	other, err := h.g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rounds := 10
	if longRun() {
		rounds = 40
	}
	for round := range rounds {
		ps := make([]uintptr, 2048)
		for i := range ps {
			if ps[i], err = h.Alloc(64); err != nil {
				t.Fatal(err)
			}
		}
		// Share every page first (TryFree refuses an exclusive one), with one held block each
		// so that they stay shared (keepShared) while the owner walks them.
		for i := 0; i < len(ps); i += 256 {
			if _, err := h.g.HoldSized(ps[i], 64); err != nil {
				t.Fatal(err)
			}
		}
		var done atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Store(true)
			for i, p := range ps {
				var ok bool
				if i%256 == 0 {
					ok = other.TryFreeHeld(p, 64)
				} else {
					ok = other.TryFree(p, 64)
				}
				if !ok {
					t.Errorf("round %d: TryFree of %#x from another heap refused", round, p)
				}
			}
		}()
		walks := 0
		for !done.Load() {
			if err := h.verifyQuiet(); err != nil {
				done.Store(true)
				wg.Wait()
				t.Fatalf("round %d: an owner's walk during another heap's TryFrees: %v", round, err)
			}
			walks++
		}
		wg.Wait()
		h.Collect()
		if err := h.verify(); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			t.Logf("%d walks during %d TryFrees", walks, len(ps))
		}
	}
}

// A slot of TestPageModesStress: a live block, and who may take it.
type stressSlot struct {
	state atomic.Uint32 // slotEmpty, slotOwner, slotRemote or slotTaken
	p, n  uintptr       // written by whoever takes an empty slot, before state
}

const (
	slotEmpty  = iota // the owner may fill it
	slotOwner         // live; the owner takes it
	slotRemote        // live; another goroutine takes it
	slotTaken         // someone is at work on it
)

// stressRun holds what TestPageModesStress's goroutines share.
type stressRun struct {
	t       *testing.T
	h, h2   *Heap // the owner's heap; h2 is a remote goroutine's, for its TryFree
	g       *Group
	slots   []stressSlot
	live    sync.Map // block address → struct{}: handed out and not yet given back
	toOwner chan [2]uintptr
	toOther chan [2]uintptr
	contest atomic.Pointer[[2]uintptr] // a block the owner frees while another goroutine does
	result  atomic.Int32               // the other goroutine's verdict on contest: 1 freed, 2 refused
	stop    atomic.Bool
	plain   bool         // holds only the owner's on exclusive pages, which may become exclusive again
	wins    atomic.Int64 // contests the other goroutine won
}

// handedOut records block p as handed out, failing when it is live already.
func (r *stressRun) handedOut(p uintptr, how string) {
	if _, dup := r.live.LoadOrStore(p, struct{}{}); dup {
		r.t.Errorf("%s handed out block %#x, which is live (or held)", how, p)
	}
}

// giveBack records block p as no longer handed out, before its free: once freed it may be
// handed out again at once.
func (r *stressRun) giveBack(p uintptr) { r.live.Delete(p) }

// TestPageModesStress races every path that moves a class page's state words on few pages: the
// owner's allocations, frees (Free, FreeSized, TryFree: plain stores on exclusive pages), holds
// (TryHoldSized: holdExcl) and frees of held blocks (TryFreeHeld, FreeHeld), with its reexclusive
// provoked often (pg.calm); other goroutines' remote frees (Group.Free, FreeSized, another heap's
// TryFree), holds (HoldSized; FindFrom, a tag, Hold: pinned's record) and FreeHeld of blocks the
// owner held; a free of one block by the owner and another goroutine at once. It checks that no
// block is handed out twice or while held, that every double free and every free of a held block is
// refused, that exactly one of two racing frees wins, and that the heap ends consistent with
// nothing live. Every other round holds only where the owner's hold keeps a page exclusive, so that
// pages become exclusive again often. Run it with -race and with -tags invariants (Collect checks
// the invariants).
func TestPageModesStress(t *testing.T) {
	rounds, ops := 15, 8000 // fresh pages each round: holds and remote frees keep pages shared
	if longRun() {
		rounds = 60
	}
	g := newTestHeap(t, 256<<20, Options{}).g
	for round := range rounds {
		h, err := g.NewHeap(Options{})
		if err != nil {
			t.Fatal(err)
		}
		h2, err := g.NewHeap(Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := &stressRun{t: t, h: h, h2: h2, g: g, slots: make([]stressSlot, 384),
			toOwner: make(chan [2]uintptr, 64), toOther: make(chan [2]uintptr, 64), plain: round%2 == 1}
		var wg sync.WaitGroup
		for who := 1; who <= 2; who++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.other(who, uint64(round*7+who))
			}()
		}
		r.owner(uint64(round), ops)
		reexcl, pages := 0, 0
		for c := range h.classes {
			for _, pg := range h.classes[c].all {
				reexcl += int(pg.reexcl)
				pages++

			}
		}
		r.stop.Store(true)
		wg.Wait()
		r.drain()
		h.Collect()
		if err := h.verify(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if st := h.Stats(); st.Live != 0 {
			t.Fatalf("round %d: %d blocks live after all were freed", round, st.Live)
		}
		if err := h.Close(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		t.Logf("round %d: %d contests won by the other goroutine; %d pages, made exclusive again %d times", round, r.wins.Load(), pages, reexcl)
		if t.Failed() {
			return
		}
	}
}

// rnd is a xorshift generator.
func rnd(s *uint64) uint64 {
	*s ^= *s << 13
	*s ^= *s >> 7
	*s ^= *s << 17
	return *s
}

// owner runs the owner's side for ops steps.
func (r *stressRun) owner(seed uint64, ops int) {
	t, h := r.t, r.h
	s := seed*0x9e3779b97f4a7c15 + 1
	sizes := []uintptr{512, 1024, 2048}
	var held [][2]uintptr // blocks the owner holds
	for op := 0; op < ops && !t.Failed(); op++ {
		sl := &r.slots[rnd(&s)%uint64(len(r.slots))]
		switch k := rnd(&s) % 100; {
		case k < 30: // fill an empty slot
			if sl.state.Load() != slotEmpty {
				continue
			}
			n := sizes[rnd(&s)%3]
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			r.handedOut(p, "Alloc")
			if tag := r.g.Tag(p); tag != nil && tag.Load() != 0 {
				t.Errorf("a block handed out reads tag %#x", tag.Load())
			}
			sl.p, sl.n = p, n
			st := uint32(slotOwner)
			if rnd(&s)%12 == 0 {
				st = slotRemote
			}
			sl.state.Store(st)
		case k < 60: // free an owner's slot, then free it again
			if !sl.state.CompareAndSwap(slotOwner, slotTaken) {
				continue
			}
			p, n := sl.p, sl.n
			r.giveBack(p)
			var err error
			switch rnd(&s) % 3 {
			case 0:
				err = h.Free(p)
			case 1:
				err = h.FreeSized(p, n)
			default:
				if !h.TryFree(p, n) {
					err = h.FreeSized(p, n) // says why
				}
			}
			if err != nil {
				t.Errorf("owner free of %#x: %v", p, err)
			}
			if err := h.FreeSized(p, n); !errors.Is(err, ErrDoubleFree) {
				t.Errorf("owner's double free of %#x: %v", p, err)
			}
			if h.TryFree(p, n) {
				t.Errorf("owner's double TryFree of %#x freed it", p)
			}
			sl.state.Store(slotEmpty)
		case k < 75: // hold an owner's slot: the block leaves the slot, held
			if !sl.state.CompareAndSwap(slotOwner, slotTaken) {
				continue
			}
			p, n := sl.p, sl.n
			if pg, _, _ := r.g.find(p); r.plain && atomic.LoadUint32(&pg.mode) != exclusive {
				sl.state.Store(slotOwner) // a hold would keep the page shared
				continue
			}
			first, ok := h.TryHoldSized(p, n)
			if !ok {
				var err error
				if first, err = r.g.HoldSized(p, n); err != nil {
					t.Errorf("owner hold of %#x: %v", p, err)
				}
			}
			if !first {
				t.Errorf("owner hold of %#x, live and not held, was not the first", p)
			}
			if err := h.FreeSized(p, n); !errors.Is(err, ErrHeld) {
				t.Errorf("owner free of held %#x: %v", p, err)
			}
			if h.TryFree(p, n) {
				t.Errorf("owner TryFree of held %#x freed it", p)
			}
			sl.state.Store(slotEmpty)
			if rnd(&s)%4 == 0 {
				select {
				case r.toOther <- [2]uintptr{p, n}: // freed by another goroutine
					continue
				default:
				}
			}
			held = append(held, [2]uintptr{p, n})
		case k < 85: // take back a held block
			select {
			case b := <-r.toOwner:
				held = append(held, b)
			default:
			}
			if len(held) == 0 {
				continue
			}
			i := rnd(&s) % uint64(len(held))
			b := held[i]
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
			r.ownerFreeHeld(b, rnd(&s)%2 == 0)
		case k < 90: // make a page try to become exclusive again at its owner's next free
			if st := sl.state.Load(); st != slotOwner && st != slotRemote {
				continue
			}
			if pg, _, ok := r.g.find(sl.p); ok && pg.heap == h && pg.class >= 0 {
				pg.calm = reexclusiveAfter - 1
			}
		case k < 93: // a free of one block by the owner and another goroutine at once
			if !sl.state.CompareAndSwap(slotOwner, slotTaken) {
				continue
			}
			p, n := sl.p, sl.n
			r.giveBack(p)
			r.result.Store(0)
			r.contest.Store(&[2]uintptr{p, n})
			for r.contest.Load() != nil && !r.stop.Load() && !t.Failed() {
				runtime.Gosched() // until another goroutine takes it: then both free at once
			}
			if rnd(&s)%2 == 0 { // the page made exclusive again as the other frees, if it may be
				if pg, _, _ := r.g.find(p); atomic.LoadUint32(&pg.mode) == shared {
					h.reexclusive(pg)
				}
			}
			var err error
			if rnd(&s)%2 == 0 {
				err = h.FreeSized(p, n)
			} else if !h.TryFree(p, n) {
				err = ErrDoubleFree
			}
			for r.result.Load() == 0 && !t.Failed() {
				runtime.Gosched()
			}
			if other := r.result.Load() == 1; (err == nil) == other {
				t.Errorf("racing frees of %#x: the owner's %v, the other's freed %v", p, err, other)
			} else if other {
				r.wins.Add(1)
			}
			sl.state.Store(slotEmpty)
		case k < 95:
			h.Collect()
		default: // a double free by the owner of a block another goroutine freed: see other
		}
	}
	for _, b := range held {
		r.ownerFreeHeld(b, false)
	}
}

// ownerFreeHeld takes back held block b by the owner: TryFreeHeld (or FreeHeld where it
// refuses), then checks that it is not held and that another FreeHeld is refused.
func (r *stressRun) ownerFreeHeld(b [2]uintptr, try bool) {
	p, n := b[0], b[1]
	r.giveBack(p)
	if !try || !r.h.TryFreeHeld(p, n) {
		if err := r.h.FreeHeld(p, n); err != nil {
			r.t.Errorf("owner FreeHeld of %#x: %v", p, err)
		}
	}
	if r.h.TryFreeHeld(p, n) {
		r.t.Errorf("owner's second TryFreeHeld of %#x freed it", p)
	}
}

// other runs another goroutine's side until stop.
func (r *stressRun) other(who int, seed uint64) {
	t, g := r.t, r.g
	s := seed*0x9e3779b97f4a7c15 + 1
	for !r.stop.Load() && !t.Failed() {
		if c := r.contest.Load(); c != nil && r.contest.CompareAndSwap(c, nil) {
			if err := g.FreeSized(c[0], c[1]); err == nil {
				r.result.Store(1)
			} else if errors.Is(err, ErrDoubleFree) {
				r.result.Store(2)
			} else {
				t.Errorf("racing free of %#x: %v", c[0], err)
				r.result.Store(2)
			}
		}
		sl := &r.slots[rnd(&s)%uint64(len(r.slots))]
		if !sl.state.CompareAndSwap(slotRemote, slotTaken) {
			select {
			case b := <-r.toOther:
				r.giveBack(b[0])
				if err := g.FreeHeld(b[0], b[1]); err != nil {
					t.Errorf("FreeHeld of %#x, held by its owner: %v", b[0], err)
				}
			default:
				runtime.Gosched()
			}
			continue
		}
		p, n := sl.p, sl.n
		switch k := rnd(&s) % 16; {
		case k < 12: // a remote free
			r.giveBack(p)
			var err error
			switch {
			case k == 0:
				err = g.Free(p)
			case k == 1 && who == 1: // h2 is this goroutine's
				if !r.h2.TryFree(p, n) {
					err = g.FreeSized(p, n) // an exclusive page: the blocking path
				}
			default:
				err = g.FreeSized(p, n)
			}
			if err != nil {
				t.Errorf("remote free of %#x: %v", p, err)
			}
			sl.state.Store(slotEmpty)
		case k < 14: // a hold (each keeps its page shared), given back by this goroutine or the owner
			if r.plain {
				sl.state.Store(slotRemote)
				continue
			}
			var first bool
			if k == 12 {
				var err error
				if first, err = g.HoldSized(p, n); err != nil {
					t.Errorf("remote hold of %#x: %v", p, err)
				}
			} else { // pinned's record: find, write the tag, then hold
				ref, ok := g.FindFrom(p, n)
				if !ok {
					t.Errorf("FindFrom of live %#x", p)
					sl.state.Store(slotRemote)
					continue
				}
				tag := ref.Tag()
				if !tag.CompareAndSwap(0, uintptr(who)<<4) {
					t.Errorf("tag of live %#x, not held, reads %#x", p, tag.Load())
				}
				var ok2 bool
				if first, ok2 = ref.Hold(); !ok2 {
					t.Errorf("BlockRef.Hold of live %#x", p)
				}
				tag.Store(0) // the holder leaves it zero
			}
			if !first {
				t.Errorf("remote hold of %#x, live and not held, was not the first", p)
			}
			if err := g.FreeSized(p, n); !errors.Is(err, ErrHeld) {
				t.Errorf("remote free of held %#x: %v", p, err)
			}
			sl.state.Store(slotEmpty)
			select {
			case r.toOwner <- [2]uintptr{p, n}:
			default:
				r.giveBack(p)
				if err := g.FreeHeld(p, n); err != nil {
					t.Errorf("remote FreeHeld of %#x: %v", p, err)
				}
			}
		default: // give it back to the owner
			sl.state.Store(slotOwner)
		}
	}
}

// drain frees what the run left live or held, as the owner, the others having stopped.
func (r *stressRun) drain() {
	for {
		select {
		case b := <-r.toOwner:
			r.ownerFreeHeld(b, false)
			continue
		case b := <-r.toOther:
			r.ownerFreeHeld(b, true)
			continue
		default:
		}
		break
	}
	for i := range r.slots {
		sl := &r.slots[i]
		if st := sl.state.Load(); st == slotOwner || st == slotRemote {
			r.giveBack(sl.p)
			if err := r.h.FreeSized(sl.p, sl.n); err != nil {
				r.t.Errorf("drain: free of %#x: %v", sl.p, err)
			}
			sl.state.Store(slotEmpty)
		} else if st == slotTaken {
			r.t.Errorf("drain: slot %d still taken", i)
		}
	}
	r.live.Range(func(p, _ any) bool {
		r.t.Errorf("block %#x handed out, never given back", p)
		return true
	})
}
