package heap

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFillEveryClass fills whole pages of every class at several alignments with Zalloc,
// writing every block's first and last byte (uncommitted memory is PROT_NONE: a fault kills the
// test), checks Zalloc zeroing after reuse, and checks accounting and commit. Under the race
// detector only the smallest and largest alignments (one goroutine's fills: the non-race runs
// take all four).
func TestFillEveryClass(t *testing.T) {
	aligns := []uintptr{16, 64, 4096, 32768}
	if raceEnabled {
		aligns = []uintptr{16, 32768}
	}
	for _, al := range aligns {
		h := newTestHeap(t, 512<<20, Options{Align: al})
		for c := range h.classes {
			cl := &h.classes[c]
			size := cl.size
			for round := 0; round < 3; round++ {
				var ps []uintptr
				var want uint32
				for i := 0; ; i++ {
					p, fresh, err := h.allocClass(size, uint8(c))
					if err != nil {
						t.Fatal(err)
					}
					pg, idx, err := h.g.locate(p)
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						want = pg.nblocks + 1
					}
					b := mem.Bytes(p, size)
					if fresh {
						if k := nonZero(b); k >= 0 {
							t.Fatalf("align %d class %d round %d: fresh block %d byte %d = %d", al, size, round, idx, k, b[k])
						}
					}
					if pg.limit > pg.nblocks || uintptr(pg.limit)*pg.bsize > uintptr(pg.ctop) {
						t.Fatalf("limit %d beyond commit %d", pg.limit, pg.ctop)
					}
					fillByte(b, 0xA5)
					ps = append(ps, p)
					if uint32(len(ps)) == want {
						break
					}
				}
				if st := h.Stats(); st.InUse != uint64(len(ps))*uint64(size) {
					t.Fatalf("InUse %d", st.InUse)
				}
				for i, p := range ps {
					var err error
					if i%2 == 0 {
						err = h.g.Free(p)
					} else {
						err = h.FreeSized(p, size)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if st := h.Stats(); st.InUse != 0 || st.Live != 0 {
					t.Fatalf("after frees: %+v", st)
				}
			}
		}
	}
}

// nonZero returns the index of b's first byte that is not zero, or -1: a word at a time, as a
// byte loop over every block of every class is most of TestFillEveryClass's time.
func nonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.NativeEndian.Uint64(b[i:]) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// fillByte sets every byte of b to v, doubling a copy.
func fillByte(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// TestZallocRemoteStress: one owner Zallocs (checking zero) large-class and small blocks, scribbles
// them and hands them to 3 freers through channels; freers free remotely. Checks Stats at the end.
func TestZallocRemoteStress(t *testing.T) {
	for _, keep := range []Retention{RetainSpare, RetainSegments} {
		h := newTestHeap(t, 1<<30, Options{Retention: keep})
		var liveSet sync.Map
		var lastFresh bool
		chs := make([]chan uintptr, 3)
		var wg sync.WaitGroup
		for i := range chs {
			chs[i] = make(chan uintptr, 256)
			wg.Add(1)
			go func(ch chan uintptr) {
				defer wg.Done()
				for p := range ch {
					liveSet.Delete(p)
					if err := h.g.Free(p); err != nil {
						t.Error(err)
					}
				}
			}(chs[i])
		}
		r := rand.New(rand.NewPCG(1, 2))
		var local []uintptr
		ops := 4_000
		if longRun() {
			ops = 15_000
		}
		for i := 0; i < ops; i++ {
			var n uintptr
			switch r.IntN(4) {
			case 0:
				n = uintptr(1 + r.IntN(2000))
			case 1:
				n = uintptr(8<<10 + r.IntN(56<<10))
			case 2:
				n = uintptr(64<<10 + r.IntN(192<<10))
			default:
				n = uintptr(256<<10 + r.IntN(1<<20))
			}
			p, fr, err := h.alloc(n, h.align)
			lastFresh = fr
			if err == nil && !fr {
				err = h.a.Zero(p, n)
			}
			if err != nil {
				t.Fatal(err)
			}
			b := mem.Bytes(p, n)
			for _, k := range []uintptr{0, n / 2, n - 1} {
				if b[k] != 0 {
					_, owned := liveSet.Load(p)
					pg, _, _ := h.g.locate(p)
					t.Fatalf("Zalloc(%d) = %#x byte %d = %d; still live elsewhere: %v; page class %d nslice %d seg kind %d lastFresh %v", n, p, k, b[k], owned, pg.class, pg.nslice, pg.seg.kind, lastFresh)
				}
			}
			for _, k := range []uintptr{0, n / 2, n - 1} {
				b[k] = 0xEE
			}
			if _, dup := liveSet.LoadOrStore(p, n); dup {
				t.Fatalf("%#x handed out twice", p)
			}
			if r.IntN(3) == 0 {
				local = append(local, p)
				if len(local) > 50 {
					k := r.IntN(len(local))
					liveSet.Delete(local[k])
					if err := h.Free(local[k]); err != nil {
						t.Fatal(err)
					}
					local = append(local[:k], local[k+1:]...)
				}
			} else {
				chs[r.IntN(3)] <- p
			}
			if i%1000 == 0 {
				h.Trim()
			}
		}
		for _, ch := range chs {
			close(ch)
		}
		wg.Wait()
		for _, p := range local {
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
		if st := h.Stats(); st.Live != 0 || st.InUse != 0 {
			t.Fatalf("end: %+v", st)
		}
		for _, cs := range h.Stats().Classes {
			if cs.Live != 0 {
				t.Fatalf("class %+v", cs)
			}
		}
	}
}

// TestZallocAfterObjectReuse: reusing a kept object page commits its slices again (clearing the
// segment's dirty bits when the arena had purged them) but never marks them dirty, so a page
// carved later over the same slices reports fresh memory that holds the old contents.
func TestZallocAfterObjectReuse(t *testing.T) {
	for _, viaSpare := range []bool{false, true} {
		a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(a, Options{})
		if err != nil {
			t.Fatal(err)
		}
		const n = 600 << 10
		p, _ := h.Alloc(n)
		q, _ := h.Alloc(n)   // keeps the object segment
		mustOK(t, h.Free(p)) // kept in objFree, its memory unwanted
		a.Trim()             // purged: the arena's dirty bits are cleared
		p2, _ := h.Alloc(n)  // reuses the kept page: Commit says zeroed, segment dirty bits cleared
		if p2 != p {
			t.Fatalf("no reuse")
		}
		mem.Bytes(p2, n)[0] = 0xEE
		mustOK(t, h.Free(p2))
		h.Trim() // drops the kept page; its slices go back to the segment (not purged: delay -1)
		var z uintptr
		if viaSpare {
			var rs []uintptr
			for range 4 {
				r, err := h.Alloc(1 << 20) // in other segments
				mustOK(t, err)
				rs = append(rs, r)
			}
			mustOK(t, h.Free(q))
			for _, r := range rs {
				mustOK(t, h.Free(r)) // the fourth pushes q out of objFree: the segment becomes the spare
			}
			// ... a large class page is carved from the spare.
			z, err = h.Zalloc(200 << 10)
		} else {
			z, err = h.Zalloc(n)
		}
		mustOK(t, err)
		if z == p && mem.Bytes(z, 1)[0] != 0 {
			t.Errorf("viaSpare=%v: Zalloc returned %#x whose first byte is %#x", viaSpare, z, mem.Bytes(z, 1)[0])
		}
		_ = h.Free(z)
		if !viaSpare {
			_ = h.Free(q)
		}
		if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Error(err)
		}
		_ = a.Close()
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReusedObjectPageFresh reuses a kept object page twice: right away, when it holds what
// was written (not fresh), and after the purge took its memory, when it reads as zero and says
// so, so that Zalloc skips the memset.
func TestReusedObjectPageFresh(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	a := h.a
	const n = 600 << 10
	p, _, err := h.alloc(n, h.align)
	mustOK(t, err)
	mem.Bytes(p, n)[0] = 1
	mustOK(t, h.Free(p))
	q, fresh, err := h.alloc(n, h.align)
	mustOK(t, err)
	if q != p || fresh {
		t.Fatalf("reuse without a purge: %#x (want %#x), fresh %v", q, p, fresh)
	}
	mustOK(t, h.Free(q))
	a.Trim()
	r, fresh, err := h.alloc(n, h.align)
	mustOK(t, err)
	if r != p || !fresh {
		t.Fatalf("reuse after the purge: %#x (want %#x), fresh %v", r, p, fresh)
	}
	if mem.Bytes(r, n)[0] != 0 {
		t.Fatal("reported fresh, but holds old data")
	}
	mustOK(t, h.Free(r))
}
