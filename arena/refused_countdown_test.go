package arena

import (
	"fmt"
	"sync/atomic"
)

// releaseCountdown wraps a provider: its Release refuses the first n calls, changing nothing,
// says on called each call it takes and on released each release it accepts.
type releaseCountdown struct {
	Provider
	n                atomic.Int32
	called, released chan struct{}
}

func newReleaseCountdown(p Provider, n int32) *releaseCountdown {
	c := &releaseCountdown{Provider: p, called: make(chan struct{}, 1),
		released: make(chan struct{}, 1)}
	c.n.Store(n)
	return c
}

func (p *releaseCountdown) Release(r *Region) error {
	signal(p.called)
	if p.n.Add(-1) >= 0 {
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	err := p.Provider.Release(r)
	if err == nil {
		signal(p.released)
	}
	return err
}

// signal says on c, unless a signal waits there already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// drain takes the signal waiting on c, if any.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}
