package ipcpool

import "testing"

// takeGone, state by state: what a process lost alive finds in the entry of a buffer it frees
// after the owner let the buffer's allocation go (freegone.go), and what it does. Its scan
// calls it again until it takes the buffer back.
func TestTakeGoneStates(t *testing.T) {
	const slot, other = 1, 2
	for _, c := range []struct {
		name     string
		state    uint64
		retained bool
		took     bool   // the buffer is back
		after    uint64 // the entry then
	}{
		{"let go by the owner", packState(2, eGone), false, true, packState(2, eGone)},
		{"retained by another", packState(1, eLive|eGone), true, false, packState(1, eLive)},
		{"retained by none", packState(1, eLive|eGone), false, true, packState(2, 0)},
		{"retired by the last release", packState(1, eLive|eRetiring|eGone), false, true,
			packState(2, 0)},
		{"marked as a retain lands", packState(1, eLive|eRetiring|eGone), true, false,
			packState(1, eLive|eRetiring|eGone)},
		{"a generation further on", packState(3, 0), false, false, packState(3, 0)},
		{"eGone lost at the generation", packState(1, eLive), false, false, packState(1, eLive)},
	} {
		l := letGoLayout
		p := &Process{layout: l, slot: slot, c: newCtl(l, make([]uint64, l.words())),
			ex: newExportState(l.exports)}
		p.ex.recs = []exportRec{{addr: 0x1000, n: 4096, gen: 1, dropped: true}}
		p.ex.byAddr[0x1000] = 0
		e := slot * l.exports
		shareEntry(&p.c, e, slot, 1, 1, 0)
		p.c.store(p.c.entry(e)+eState, c.state)
		if c.retained {
			p.c.setRetain(e, other, true)
		}
		p.ex.mu.Lock()
		took := p.takeGone(0)
		p.ex.mu.Unlock()
		if got := p.c.load(p.c.entry(e) + eState); took != c.took || got != c.after {
			t.Errorf("%s: took %v, the entry %#x; want %v, %#x", c.name, took, got, c.took, c.after)
		}
		if r := p.ex.recs[0]; took != r.taking { // (its caller frees the block, and forgets it)
			t.Errorf("%s: took %v, its record %+v", c.name, took, r)
		}
	}
}
