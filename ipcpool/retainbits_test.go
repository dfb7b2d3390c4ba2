package ipcpool

import (
	"context"
	"testing"
	"time"
)

// A retain bit is a word of the control region: a hostile process sets one in another
// process's entry, for a slot no process holds, or for its own slot while it clears its
// flagRetains (the owner then skips its bits as it leaves), or for the owner's slot (never
// free) though the owner holds no retain of it. The entry's holder frees the
// buffer and leaves: the buffer is an orphan, retained by nobody attached, and its grants
// must come back all the same. (Before, settleOrphans waited for the bit's holder, which
// never comes: the grants stayed orphaned for good, one buffer of every process at a time.)
func TestForgedRetainBitsLeakNoGrants(t *testing.T) {
	for _, forge := range []string{"a free slot", "its own slot, flag cleared", "the owner's slot"} {
		t.Run(forge, func(t *testing.T) {
			w, path := serveTest(t, Options{Size: 16 << 20, GrantSize: 2 << 20, Slots: 4})
			p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
			must(t, "Attach", err)
			bad, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
			must(t, "Attach hostile", err)
			b, err := p.Alloc(5000)
			must(t, "Alloc", err)
			h, err := p.Handle(b)
			must(t, "Handle", err)
			c := &bad.c
			slot := 3 // no process
			switch forge {
			case "its own slot, flag cleared":
				slot = bad.slot
				c.slotStore(bad.slot, sFlags, 0)
			case "the owner's slot": // never free: the owner knows its own retains
				slot = 0
			}
			i, bit := c.retainWord(int(h.Entry), slot)
			c.store(i, c.load(i)|bit)
			_ = bad.Close()
			must(t, "Free", p.Free(b)) // not the last reference: the forged bit keeps it
			_ = p.Close()              // (its buffer still live: given up)
			waitFor(t, func() bool { return w.Attached() == 0 })
			deadline := time.Now().Add(3 * time.Second)
			for {
				ps := w.SharedStats().Pool
				if ps.Orphaned == 0 && ps.Limbo == 0 && ps.Held == w.src.grantsHeld() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("grants of a process gone kept by a forged retain bit: %+v", ps)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
