package ipcpool

import (
	"os"
	"testing"
)

// BenchmarkOwnerRound: the owner's round, which runs every DefaultDrainInterval, over a pool of
// 32,768 grants (64 GiB in 2 MiB grants) that 16 processes left, each holding 64 grants in
// limbo and one buffer that a live process retains: processes that left alive, and processes
// that have exited (the round then looks at their grants, which the retained buffers keep).
func BenchmarkOwnerRound(b *testing.B) {
	b.Run("alive", func(b *testing.B) { benchOwnerRound(b, false) })
	b.Run("exited", func(b *testing.B) { benchOwnerRound(b, true) })
}

func benchOwnerRound(b *testing.B, exited bool) {
	const gones, each = 16, 64
	const retainer = gones + 1
	l := layout{regions: 1, regionSize: 64 << 30, grantSize: 2 << 20, slots: gones + 2, ringCap: 4, exports: 2}
	w, c := bareOwner(l)
	w.procs[retainer] = slotState{used: true, active: true, serial: 1}
	alive := watchProcess(os.Getppid())
	if alive.pidfd < 0 {
		b.Skip("no pidfd to watch a live process by")
	}
	defer alive.stop()
	for k := range gones {
		g := newGone(k+1, 1, alive, exited)
		e := (k + 1) * l.exports
		shareEntry(c, e, k+1, 1, 1, eLive|eGone)
		i, bit := c.retainWord(e, retainer)
		c.store(i, bit)
		g.pin(e, span{k * each, k * each}, 1)
		state := gLimbo
		if exited {
			state = gOrphan
		}
		for i := range each {
			w.table[k*each+i] = grantState{state: state, gone: g, gen: 1}
		}
		w.goneList = append(w.goneList, g)
	}
	for b.Loop() {
		w.tickLocked()
	}
	if len(w.goneList) != gones {
		b.Fatalf("%d processes gone after the rounds, want %d", len(w.goneList), gones)
	}
	if exited {
		for k := range gones { // the grant under the retained buffer (the others went free)
			if t := w.table[k*each]; t.state != gOrphan || t.gone == nil {
				b.Fatalf("grant %d is %+v after the rounds", k*each, t)
			}
		}
	}
}
