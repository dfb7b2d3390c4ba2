package streamcheck

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFinishFailureAbandons makes the final checks fail on a tier block after an earlier one
// was checked and freed, and the bytes of a pool buffer after another was freed: the run must
// report the failure and tear down, where the teardown met the entries the final checks had
// deleted (a nil dereference that hid the failure and stopped the later seeds).
func TestFinishFailureAbandons(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	rig := Rig{F: f, Dev: f.Open(t, 0)}
	cfg := ConfigFor(1)
	for _, c := range []struct {
		name  string
		ops   []Op
		spoil func(w *world)
	}{
		{"tier block", []Op{
			{ID: 0, Kind: TierAlloc, N: 4096, A: -1, B: -1},
			{ID: 1, Kind: TierAlloc, N: 4096, A: -1, B: -1},
			{ID: 2, Kind: TierHost, A: 0, B: -1, Flag: true, V: 7},
			{ID: 3, Kind: TierHost, A: 1, B: -1, Flag: true, V: 9},
		}, func(w *world) { w.tb[1].want[0] ^= 0xff }},
		{"pool buffer", []Op{
			{ID: 0, Kind: PoolAlloc, N: 4096, A: -1, B: -1, V: 1},
			{ID: 1, Kind: PoolAlloc, N: 4096, A: -1, B: -1, V: 2},
		}, func(w *world) {
			// The second buffer's bytes pass the check, and its Free is refused (a
			// sub-slice) after the first was freed.
			bf := w.bufs[1]
			bf.b, bf.want = bf.b[1:], bf.want[1:]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := newWorld(cfg, rig)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range c.ops {
				if applied, f := w.apply(op); !applied || f != nil {
					t.Fatalf("%v: applied %v, %v", op, applied, f)
				}
			}
			c.spoil(w)
			f := w.finish()
			w.abandon()
			if f == nil {
				t.Fatal("the final checks passed a spoiled model")
			}
			t.Logf("failed as it must: %v", f)
		})
	}
}
