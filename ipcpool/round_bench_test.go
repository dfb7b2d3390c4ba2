package ipcpool

import (
	"os"
	"testing"
)

// BenchmarkOwnerRound: the owner's round, which runs every DefaultDrainInterval, over a pool of
// 32,768 grants (64 GiB in 2 MiB grants) that 16 processes left alive, each holding 64 grants in
// limbo and one buffer others retain.
func BenchmarkOwnerRound(b *testing.B) {
	const gones, each = 16, 64
	l := layout{regions: 1, regionSize: 64 << 30, grantSize: 2 << 20, slots: gones + 1, ringCap: 4, exports: 2}
	w, c := bareOwner(l)
	alive := watchProcess(os.Getppid())
	if alive.pidfd < 0 {
		b.Skip("no pidfd to watch a live process by")
	}
	defer alive.stop()
	for k := range gones {
		g := newGone(k+1, 1, alive, false)
		e := (k + 1) * l.exports
		shareEntry(c, e, k+1, 1, 1, eLive)
		g.pin(e, span{k * each, k * each}, 1)
		for i := range each {
			w.table[k*each+i] = grantState{state: gLimbo, gone: g, gen: 1}
		}
		w.goneList = append(w.goneList, g)
	}
	for b.Loop() {
		w.tickLocked()
	}
	if len(w.goneList) != gones {
		b.Fatalf("%d processes gone after the rounds, want %d", len(w.goneList), gones)
	}
}
