package ipcpool

import (
	"errors"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// The drainer: every DrainInterval each process takes in the handles of its buffers that
// peers let go (its rings, and a scan of its entries when a peer found a ring full) and
// passes the owner's fence; its tidier answers the owner's ask for empty grants, and now and
// then gives the empty pages of its pool back to the arena (pinned.Pool.Compact), whose
// empty grants go back to the owner once they have stayed empty for the purge delay. The
// owner's watcher looks after the processes gone and the grants they left (table.go).

// compactEvery is how often a process compacts its pool at least.
const compactEvery = 50 * time.Millisecond

// drainer runs the process's duties that must never wait: fences, rings. The pool's
// maintenance (Compact, Trim), which holds the pool's shards and so waits for an Alloc that
// waits for a grant, runs on tidier; the owner's bookkeeping on its watcher. So a grant
// request that waits for a fence (or for this process's own empty grants) is never stuck
// behind this process's own work.
func (p *Process) drainer() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	tidied := make(chan struct{})
	go p.tidier(tidied)
	defer func() { <-tidied }()
	last := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.passFence()
			p.drain()
			if time.Since(last) >= scanEvery {
				// A retirement its retirer could deliver nowhere (a slot word a peer
				// overwrote), or never made (killed first), is taken in all the same: a
				// lost delivery leaks nothing.
				last = time.Now()
				p.drainMu.Lock()
				p.scanRetired()
				p.drainMu.Unlock()
				p.clearUntaken()
			}
		}
	}
}

// scanEvery is how often a process looks through its shared buffers for retired ones no ring
// brought it.
const scanEvery = 100 * time.Millisecond

// tidier compacts the pool now and then and answers the owner's asks, until stop.
func (p *Process) tidier(done chan struct{}) {
	defer close(done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			if p.answerAsk() {
				last = time.Now()
			} else if time.Since(last) >= compactEvery {
				last = time.Now()
				p.Pool.Compact()
			}
		}
	}
}

// passFence passes a fence the owner published: it synchronizes the process's CUDA context,
// so that no copy it queued into memory the owner took back is still to run, and says so in
// its fence word. A synchronize that fails with the context's sticky error passes too: nothing
// of it runs any more either. One the driver refuses because a stream of the context captures
// a CUDA graph (cuda.ErrCapturing, in every capture mode) waited for nothing, and the copies
// queued are still to run: the fence stays, for a later tick to pass once the capture is over.
// A process without a device passes at once: its copies from and to the pool, pageable to the
// driver, are done when their calls return.
func (p *Process) passFence() {
	e := p.c.load(hFence)
	if e == p.fence {
		return
	}
	if p.dev != nil {
		if err := p.dev.Synchronize(); errors.Is(err, cuda.ErrCapturing) {
			return
		}
	}
	p.c.slotStore(p.slot, sFence, e)
	p.fence = e
}

// drain takes in the handles of this process's buffers that peers let go: every ring to it
// and, when a peer found one full, a scan of its entries. It returns how many it took.
func (p *Process) drain() int {
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	n := 0
	for q := range p.slots {
		if q == p.slot || !p.c.pending(q, p.slot) {
			continue
		}
		n += p.c.drain(q, p.slot, func(e uint64) {
			i, gen := unpackRing(e)
			p.takeRetired(i, gen)
		})
	}
	if o := p.c.slotLoad(p.slot, sOverflow); o != p.overflow {
		p.overflow = o
		n += p.scanRetired()
	}
	return n
}

// scanRetired takes in every entry of this process's that is retired at the generation it
// recorded (a peer retired it and found the ring full), and retires, to take it in, every one
// left live with no reference (a peer killed between letting the last reference go and
// retiring the entry: a compare-and-swap decides against any retirer, as tryRetire says).
func (p *Process) scanRetired() int {
	p.st.scans.Add(1)
	type ret struct {
		i   int
		gen uint32
	}
	type took struct {
		i int
		r exportRec
	}
	var found []ret
	var gone []took
	p.ex.mu.Lock()
	for i, r := range p.ex.recs {
		if r.addr == 0 || r.taking {
			continue
		}
		if r.dropped && p.takeGone(i) {
			gone = append(gone, took{i, r})
			continue
		}
		e := p.slot*p.exports + i
		switch w := p.c.load(p.c.entry(e) + eState); {
		case w == packState(r.gen, eLive|eRetiring),
			w == packState(r.gen, eLive) && p.c.tryRetire(e, r.gen):
			found = append(found, ret{i, r.gen})
		}
	}
	pause := p.pauseTake
	p.ex.mu.Unlock()
	for _, g := range gone {
		p.giveBack(g.i, g.r, pause)
	}
	for _, f := range found {
		p.takeRetired(f.i, f.gen)
	}
	return len(found) + len(gone)
}

// answerAsk gives the owner the process's empty grants now when it asked (another process
// needs memory): the pool's empty pages go to the arena, which gives its empty regions back
// at once (Trim).
func (p *Process) answerAsk() bool {
	a := p.c.slotLoad(p.slot, sAsk)
	if a == p.asked {
		return false
	}
	p.asked = a
	p.st.trims.Add(1) // before the grants go: a request they serve may look
	_ = p.Pool.Trim() // a pool of memfds has no streams: nothing to report; registered memory is trimmed all the same
	p.c.slotStore(p.slot, sAnswer, a)
	return true
}

// Collect takes in now the handles of this process's buffers that peers let go (the drainer
// does every drain interval).
func (p *Process) Collect() {
	if !p.enter() {
		return
	}
	defer p.exit()
	p.drain()
}
