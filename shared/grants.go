package shared

// The owner's grant table: grants given to processes, taken back, fenced and unfenced.

import (
	"fmt"
)

// grant gives slot n contiguous free grants of one region, of a new generation. Fenced
// grants are not free yet: while every process has not passed their fence, a request they
// alone could satisfy fails with ErrPoolFull.
func (w *Owner) grant(slot, n int) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	per := c.grantsPerRegion()
	if n <= 0 || n > per {
		return 0, fmt.Errorf("%w: %d grants", ErrPoolFull, n)
	}
	w.unfence()
	for r := 0; r < c.regions; r++ {
		run := 0
		for i := r * per; i < (r+1)*per; i++ {
			if v := c.load(c.grantWord(i)); v&grantFenced != 0 || unpackSlot(v) >= 0 {
				run = 0
				continue
			}
			if run++; run == n {
				first := i - n + 1
				w.gen++
				for g := first; g <= i; g++ {
					c.store(c.grantWord(g), packGrant(w.gen, slot))
				}
				return first, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: no %d contiguous free grants", ErrPoolFull, n)
}

// release takes back grants [first, first+n) from slot, which must hold them.
func (w *Owner) release(slot, first, n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	if first < 0 || n <= 0 || first+n > c.grants() {
		return ErrProtocol
	}
	for g := first; g < first+n; g++ {
		if _, s := c.grant(g); s != slot {
			return ErrProtocol
		}
	}
	w.gen++
	for g := first; g < first+n; g++ {
		c.store(c.grantWord(g), packGrant(w.gen, -1))
	}
	return nil
}

// reclaim takes back every grant slot holds: those of a process that died, or left buffers
// behind. Other processes may still have copies queued on their streams into those buffers
// (they got them by handle), so the grants are fenced: they are handed out again only once
// every process attached now has passed the fence (its drainer synchronized its CUDA context
// after the epoch was published; see Process.passFence) or has left.
func (w *Owner) reclaim(slot int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	w.gen++
	n := 0
	for g := 0; g < c.grants(); g++ {
		if _, s := c.grant(g); s == slot {
			c.store(c.grantWord(g), packGrant(w.gen, -1)|grantFenced)
			n++
		}
	}
	if n == 0 {
		return
	}
	// One fence for every fenced grant: a process that passes this epoch passed the earlier.
	w.epoch++
	w.fenced = true
	for i, u := range w.used {
		w.need[i] = 0
		if u && i != slot {
			w.need[i] = w.serial[i]
		}
	}
	c.store(hFence, w.epoch)
}

// unfence frees the fenced grants once every process that had to pass the fence has passed it
// or left its slot. Called with w.mu held.
func (w *Owner) unfence() {
	if !w.fenced {
		return
	}
	c := &w.Process.c
	for i, s := range w.need {
		if s != 0 && w.used[i] && w.serial[i] == s && c.load(c.fenceWord(i)) < w.epoch {
			return
		}
	}
	for g := 0; g < c.grants(); g++ {
		if v := c.load(c.grantWord(g)); v&grantFenced != 0 {
			c.store(c.grantWord(g), v&^grantFenced)
		}
	}
	w.fenced = false
}

// ownerGranter is the owner's own granter: the server, called in process.
type ownerGranter struct{ w *Owner }

func (g ownerGranter) grant(n int) (int, error)   { return g.w.grant(0, n) }
func (g ownerGranter) release(first, n int) error { return g.w.release(0, first, n) }
