package streamq_test

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestListsLegacyProperty drives Lists with random work on two non-blocking streams, two
// blocking ones and the legacy default stream, pushes, Reclaims, Drains, Settles, completions,
// CUDA graph captures (GLOBAL) and streams forgotten and destroyed (their handles given to the
// next stream created), half the seeds with own points (OwnPoints), under the fake's Hold. Each
// piece of work is a one-byte memset of a slot of its own, read from the fake's memory when an
// item comes back: an item comes back only once its stream's work queued before its push has
// run and, for a blocking stream, the legacy stream's; for the legacy stream, every blocking
// stream's, destroyed ones' included. No capture is invalidated, and every item comes back once.
func TestListsLegacyProperty(t *testing.T) { legacyProperty(t, true) }

// TestListsLegacyPropertyDestroyed is TestListsLegacyProperty with handles not reused, and half
// the streams destroyed without Forget (their lists lost, answered by a synchronize of the
// context unless a capture holds a stream the lists know). It ended a capture on a stream seen
// whose list had left, through Settle's synchronize for a destroyed stream (seed 143).
func TestListsLegacyPropertyDestroyed(t *testing.T) { legacyProperty(t, false) }

func legacyProperty(t *testing.T, reuse bool) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	runtime.LockOSThread() // a GLOBAL capture ends on the thread that began it
	t.Cleanup(runtime.UnlockOSThread)
	_, _, p, _ := testStreams(t, dev, 0)
	mk := func(nonBlocking bool) streamq.Stream {
		s, err := dev.StreamCreate(nonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const legacy = 4 // all[legacy] is the legacy stream; all[:2] non-blocking, all[2:4] blocking
	all := []streamq.Stream{mk(true), mk(true), mk(false), mk(false), 0}
	t.Cleanup(func() {
		for _, s := range all[:legacy] {
			if err := dev.StreamDestroy(s); err != nil {
				t.Error(err)
			}
		}
	})
	f.ReuseStreamHandles(reuse)
	const slots = 1 << 12
	buf, err := dev.MemAlloc(slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Complete()
		if err := dev.MemFree(buf); err != nil {
			t.Error(err)
		}
	})
	// The fake's device memory is host memory: read as it is, nothing run.
	mem := unsafe.Slice(*(**byte)(unsafe.Pointer(&buf)), slots)
	type item struct {
		id   int
		need []int // the slots of the work it waits for (-1: none)
		ev   cuda.Event
	}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		ls := streamq.NewLists[item](p, nil, 2)
		own := seed%2 == 1
		if own {
			ls.OwnPoints(func(it item) streamq.Event { return it.ev })
		}
		f.Complete()
		clear(mem)
		f.Hold(true)
		slot, next := 0, 0
		last := []int{-1, -1, -1, -1, -1} // the slot of each stream's last work
		var dead []int                    // the last slots of blocking streams destroyed
		out := map[int]bool{}
		check := func(step int, what string, got []item) {
			t.Helper()
			for _, it := range got {
				if !out[it.id] {
					t.Fatalf("seed %d step %d, %s: item %d back twice", seed, step, what, it.id)
				}
				delete(out, it.id)
				for _, s := range it.need {
					if s >= 0 && mem[s] != 1 {
						t.Fatalf("seed %d step %d, %s: item %d back before the work of slot %d ran", seed, step, what, it.id, s)
					}
				}
				if it.ev != 0 {
					if err := dev.EventDestroy(it.ev); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for _, s := range all { // every stream known to the lists (Captured asks them)
			if _, err := ls.Check(s); err != nil {
				t.Fatal(err)
			}
		}
		capturing := -1
		endCapture := func(what string) {
			g, err := dev.StreamEndCapture(all[capturing])
			if err != nil {
				t.Fatalf("seed %d, %s: the capture on %#x was invalidated: %v", seed, what, all[capturing], err)
			}
			if err := dev.GraphDestroy(g); err != nil {
				t.Fatal(err)
			}
			capturing = -1
		}
		for step := range 300 {
			k := r.IntN(len(all))
			// held: a capture holds k (or the legacy stream, while a blocking stream captures)
			held := capturing >= 0 && (k == capturing || k == legacy && capturing >= 2)
			switch op := r.IntN(21); {
			case op < 7: // work
				if slot == slots || held {
					break
				}
				if err := dev.MemsetD8Async(buf+uintptr(slot), 1, 1, all[k]); err != nil {
					t.Fatal(err)
				}
				last[k] = slot
				slot++
			case op < 12: // a push
				need := []int{last[k]}
				switch {
				case k == legacy:
					need = append(need, last[2], last[3])
					need = append(need, dead...)
				case k >= 2:
					need = append(need, last[legacy])
				}
				l, err := ls.Check(all[k])
				if err != nil {
					t.Fatal(err)
				}
				var ev cuda.Event
				if own && !held {
					if ev, err = dev.EventCreate(true); err != nil {
						t.Fatal(err)
					}
					if err := dev.EventRecord(ev, all[k]); err != nil {
						t.Fatal(err)
					}
				}
				out[next] = true
				ls.Push(l, item{next, need, ev})
				next++
			case op < 15:
				got, err := ls.Reclaim(nil, nil)
				if err != nil && reuse {
					t.Fatal(err)
				}
				check(step, "reclaim", got)
			case op < 17:
				f.CompleteStream(all[k])
			case op < 18:
				got, err := ls.Drain(nil)
				check(step, "drain", got)
				if err != nil { // a capture, or a destroyed stream
					got, _ = ls.Reclaim(nil, nil)
					check(step, "reclaim after a drain", got)
				}
			case op < 19:
				got, _, _, _ := ls.Settle(nil, nil)
				check(step, "settle", got)
			case op < 20: // a capture begins or ends
				if capturing >= 0 {
					endCapture("its end")
				} else if k != legacy {
					capturing = k
					if err := dev.StreamBeginCapture(all[k], cuda.CaptureGlobal); err != nil {
						t.Fatal(err)
					}
				}
			default: // a stream destroyed, forgotten first unless its handle stays unused
				if k == legacy || capturing >= 0 {
					break
				}
				if reuse || r.IntN(2) == 0 {
					if err := p.WaitStream(all[k]); err != nil {
						t.Fatal(err)
					}
					if l := ls.Forget(all[k]); l != nil {
						check(step, "release", ls.Release(l, nil))
					}
				}
				if err := dev.StreamDestroy(all[k]); err != nil {
					t.Fatal(err)
				}
				if all[k] = mk(k < 2); k >= 2 && last[k] >= 0 {
					dead = append(dead, last[k])
				}
				last[k] = -1
				if _, err := ls.Check(all[k]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if capturing >= 0 {
			endCapture("the end")
		}
		f.Hold(false)
		f.Complete()
		for range 2 {
			got, err := ls.Reclaim(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			check(-1, "last reclaim", got)
		}
		if len(out) != 0 {
			t.Fatalf("seed %d: %d items never back", seed, len(out))
		}
		if err := ls.Verify(nil); err != nil {
			t.Fatal(err)
		}
	}
}
