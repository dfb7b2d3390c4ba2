package pinned

import (
	"errors"

	"github.com/pinmalloc/pinmalloc/arena"
)

// ObserveRegions adds o to the observers of the pool's regions: o is told of each region the
// pool has mapped, now and as the pool grows, and of each before it is given back (when the
// pool's memory is released). It is how a registrar of the pool's memory with a network card
// (package remote) registers a few regions once rather than every buffer. o's methods run with
// the pool's arena locked and must not call the pool. After the pool's memory is released it
// returns an error wrapping ErrClosed; an error from o.Mapped is returned as it is.
func (p *Pool) ObserveRegions(o arena.RegionObserver) error {
	if p.released.Load() {
		return ErrClosed
	}
	err := p.a.Observe(o)
	if errors.Is(err, arena.ErrClosed) {
		return ErrClosed
	}
	return err
}

// UnobserveRegions removes o, added by ObserveRegions, telling it of the regions mapped now as
// if each were given back.
func (p *Pool) UnobserveRegions(o arena.RegionObserver) { p.a.Unobserve(o) }
