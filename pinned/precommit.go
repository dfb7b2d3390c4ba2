package pinned

import (
	"errors"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
)

// precommit is the state of the background commit that Options.Precommit asks for. The
// goroutine commits chunk by chunk through arena.Precommit, which never holds the arena's lock
// while the provider commits: Alloc goes on meanwhile and never waits for it.
type precommit struct {
	mu      sync.Mutex
	running bool
	err     error
	done    chan struct{}
}

// startPrecommit starts committing n bytes in the background (none when n is zero).
func (p *Pool) startPrecommit(n int64) {
	if n <= 0 {
		return
	}
	p.pc.running = true
	p.pc.done = make(chan struct{})
	go func() {
		defer close(p.pc.done)
		_, err := p.a.Precommit(uintptr(n))
		if errors.Is(err, arena.ErrClosed) {
			err = nil // the pool closed first: nothing to report
		}
		p.pc.mu.Lock()
		p.pc.running, p.pc.err = false, err
		p.pc.mu.Unlock()
	}()
}

// WaitPrecommit waits until the background commit of Options.Precommit is over and returns its
// error: the first commit the system or driver refused (it stops there), nil when it committed
// what was asked, or stopped at the capacity. It returns nil at once when none was asked.
func (p *Pool) WaitPrecommit() error {
	if p.pc.done == nil {
		return nil
	}
	<-p.pc.done
	p.pc.mu.Lock()
	defer p.pc.mu.Unlock()
	return p.pc.err
}

// precommitState reports whether the background commit runs, and its error once over.
func (p *Pool) precommitState() (running bool, err error) {
	p.pc.mu.Lock()
	defer p.pc.mu.Unlock()
	return p.pc.running, p.pc.err
}
