// Region observers: code outside the arena that must know each region while it is mapped (a
// registrar of memory with a network card, which registers a region once rather than every
// buffer in it).

package arena

import "errors"

// RegionObserver learns of an arena's regions: Mapped when a region has been reserved from
// the provider, before any span of it is handed out, and Unmapping before the arena gives a
// region back to the provider, when no span of it is in use any more. Both run with the
// arena's lock held, so they must not call the arena; each region is told to each observer
// once, in the order the regions were mapped.
type RegionObserver interface {
	// Mapped is told of region r. An error refuses the region: the arena gives it back to the
	// provider, and the allocation that needed it fails with the error (Observe: the observer
	// is not added).
	Mapped(r *Region) error
	// Unmapping is told that r is about to be given back; r's memory is still mapped.
	Unmapping(r *Region)
}

// Observe adds o to the arena's observers and tells it, in order, of each region mapped now.
// If o refuses one, the regions it was told of are taken back (Unmapping), o is not added,
// and Observe returns the error. After Close, it returns ErrClosed.
func (a *Arena) Observe(o RegionObserver) error {
	if o == nil {
		return errors.Join(ErrInvalid, errors.New("arena: nil observer"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	regs := *a.regions.Load()
	for i, r := range regs {
		if err := o.Mapped(r.r); err != nil {
			for _, done := range regs[:i] {
				o.Unmapping(done.r)
			}
			return err
		}
	}
	a.observers = append(a.observers, o)
	return nil
}

// Unobserve removes o and tells it, for each region mapped now, that it is unmapping from o's
// point of view: o is told of no region from then on. It does nothing for an observer not
// added.
func (a *Arena) Unobserve(o RegionObserver) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.observers {
		if x == o {
			a.observers = append(a.observers[:i:i], a.observers[i+1:]...)
			for _, r := range *a.regions.Load() {
				o.Unmapping(r.r)
			}
			return
		}
	}
}

// mapped tells the observers of region r, newly reserved, under a.mu; when one refuses it,
// those told are told it goes, and the refusal is returned.
func (a *Arena) mapped(r *Region) error {
	for i, o := range a.observers {
		if err := o.Mapped(r); err != nil {
			for _, done := range a.observers[:i] {
				done.Unmapping(r)
			}
			return err
		}
	}
	return nil
}

// unmapping tells the observers that region r is about to be given back, under a.mu.
func (a *Arena) unmapping(r *Region) {
	for _, o := range a.observers {
		o.Unmapping(r)
	}
}
