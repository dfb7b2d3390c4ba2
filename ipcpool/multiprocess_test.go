package ipcpool

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buf is a buffer of the model: its holder, handle, contents, and its references.
type buf struct {
	proc    int // 0: the owner; 1..3: the children
	h       Handle
	seed    uint64
	alloc   bool        // its allocation is not let go yet
	retains map[int]int // by process
}

func (b *buf) live() bool { return b.alloc || len(b.retains) > 0 }

// rig is the owner (this process) and its children, driven by a model of the buffers.
type rig struct {
	t     *testing.T
	w     *Owner
	kids  []*child // kids[0] is nil: the owner
	r     *rand.Rand
	bufs  []*buf
	alive []int
}

func (g *rig) pick() int { return g.alive[g.r.IntN(len(g.alive))] }

func (g *rig) alloc(proc int) {
	n, s := 1+g.r.IntN(4096), g.r.Uint64()
	if g.r.IntN(5) == 0 {
		n = 1 + g.r.IntN(48<<10)
	}
	var h Handle
	if proc == 0 {
		b, err := g.w.Alloc(n)
		must(g.t, "owner Alloc", err)
		fill(b, s)
		h, err = g.w.Handle(b)
		must(g.t, "owner Handle", err)
	} else {
		h = g.kids[proc].alloc(g.t, n, s)
	}
	g.bufs = append(g.bufs, &buf{proc: proc, h: h, seed: s, alloc: true, retains: map[int]int{}})
}

// run has proc run cmd on b: the owner itself, a child over its stdin.
func (g *rig) run(proc int, cmd string, b *buf) string {
	g.t.Helper()
	if proc != 0 {
		if cmd == "C" {
			return g.kids[proc].do(g.t, "C %s %d", fmtHandle(b.h), b.seed)
		}
		return g.kids[proc].do(g.t, "%s %s", cmd, fmtHandle(b.h))
	}
	f := append([]string{cmd}, strings.Fields(fmtHandle(b.h))...)
	if cmd == "C" {
		f = append(f, strconv.FormatUint(b.seed, 10))
	}
	return childCommand(g.w.Process, f)
}

func (g *rig) expect(proc int, cmd string, b *buf, want string) {
	g.t.Helper()
	if got := g.run(proc, cmd, b); got != want {
		g.t.Fatalf("process %d: %s %v (of process %d): %q, want %q", proc, cmd, b.h, b.proc, got, want)
	}
}

// step makes one random operation and checks its result against the model.
func (g *rig) step() {
	if len(g.bufs) == 0 || g.r.IntN(10) < 3 {
		g.alloc(g.pick())
		return
	}
	i := g.r.IntN(len(g.bufs))
	b := g.bufs[i]
	p := g.pick()
	switch x := g.r.IntN(10); {
	case x < 4:
		g.expect(p, "C", b, "OK")
	case x < 6: // let the allocation go, by handle or by address
		cmd := "F"
		if g.r.IntN(2) == 0 {
			cmd = "B"
		}
		if b.alloc {
			g.expect(p, cmd, b, "OK")
			b.alloc = false
		} else {
			g.expect(p, "F", b, "E stale") // a replay
		}
	case x < 8:
		g.expect(p, "R", b, "OK")
		b.retains[p]++
	default:
		if b.retains[p] == 0 {
			g.expect(p, "L", b, "E stale")
			break
		}
		g.expect(p, "L", b, "OK")
		if b.retains[p]--; b.retains[p] == 0 {
			delete(b.retains, p)
		}
	}
	if !b.live() {
		g.expect(g.pick(), "C", b, "E stale")
		g.bufs[i] = g.bufs[len(g.bufs)-1]
		g.bufs = g.bufs[:len(g.bufs)-1]
	}
}

// kill kills child k (SIGKILL) with its buffers live, shared and retained, and checks the
// model after: its retains are dropped, its allocations let go, what others retain of its
// buffers still reads intact, the rest is stale.
func (g *rig) kill(k int) {
	c := g.kids[k]
	must(g.t, "kill", c.cmd.Process.Signal(syscall.SIGKILL))
	_ = c.cmd.Wait()
	c.dead = true
	var alive []int
	for _, p := range g.alive {
		if p != k {
			alive = append(alive, p)
		}
	}
	g.alive = alive
	waitFor(g.t, func() bool { return !g.w.slotUsed(k) })
	kept := g.bufs[:0]
	for _, b := range g.bufs {
		delete(b.retains, k)
		if b.proc == k {
			b.alloc = false
		}
		if b.live() {
			g.expect(g.pick(), "C", b, "OK")
			kept = append(kept, b)
		} else {
			g.expect(g.pick(), "C", b, "E stale")
		}
	}
	g.bufs = kept
}

// finish lets everything go and checks that the pool has every grant back.
func (g *rig) finish() {
	for _, b := range g.bufs {
		g.expect(g.pick(), "C", b, "OK")
		if b.alloc {
			g.expect(g.pick(), "F", b, "OK")
		}
		for p, n := range b.retains {
			for range n {
				g.expect(p, "L", b, "OK")
			}
		}
		g.expect(g.pick(), "C", b, "E stale")
	}
	g.bufs = nil
	for _, p := range g.alive {
		if p != 0 {
			g.kids[p].quit(g.t)
		}
	}
	waitFor(g.t, func() bool { return g.w.Attached() == 0 })
	waitFor(g.t, func() bool {
		g.w.Collect()
		ps := g.w.SharedStats().Pool
		return g.w.Pool.Stats().Live == 0 && ps.Exported == 0 && ps.Orphaned == 0 && ps.Limbo == 0 && ps.Held == g.w.src.grantsHeld()
	})
	if st := g.w.SharedStats(); st.Dropped != 0 || st.FreeErrors != 0 {
		g.t.Errorf("owner: %d dropped, %d free errors", st.Dropped, st.FreeErrors)
	}
}

// TestMultiProcess: the owner and three processes share buffers by handle, free them by
// handle and by address, retain and release them, with replays; one child is killed with
// SIGKILL half-way with its buffers shared and retained.
func TestMultiProcess(t *testing.T) {
	multiProcess(t, Options{})
}

func multiProcess(t *testing.T, o Options, env ...string) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	o.Size, o.GrantSize, o.RingSize, o.FallbackPageable = 96<<20, 2<<20, 64, true
	w, err := Serve(path, o)
	must(t, "Serve", err)
	defer w.Close()
	g := &rig{t: t, w: w, kids: []*child{nil}, alive: []int{0, 1, 2, 3}}
	for range 3 {
		g.kids = append(g.kids, startChild(t, path, env...))
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g.r = rand.New(rand.NewPCG(seed, 2))
	ops := 600
	if long() {
		ops = 6000
	}
	for op := range ops {
		if op == ops/2 {
			g.kill(3)
		}
		g.step()
		for len(g.bufs) > 60 { // keep the pool from filling
			b := g.bufs[0]
			g.bufs = g.bufs[1:]
			if b.alloc {
				g.expect(g.pick(), "F", b, "OK")
			}
			for p, n := range b.retains {
				for range n {
					g.expect(p, "L", b, "OK")
				}
			}
		}
	}
	g.finish()
	must(t, "owner Close", w.Close())
}

// long reports whether the long forms of the tests run (PINMALLOC_LONG=1; CI sets it).
func long() bool { return os.Getenv("PINMALLOC_LONG") != "" }

// slotUsed reports whether slot s is taken, or kept for the retains of a process gone from it
// that has not been seen to exit yet.
func (w *Owner) slotUsed(s int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procs[s].used || w.procs[s].keeper != nil
}
