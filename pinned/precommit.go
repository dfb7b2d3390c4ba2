package pinned

import (
	"errors"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
)

// precommit is the state of the background commit that Options.Precommit asks for. The
// goroutine commits batch by batch through arena.Precommit (several chunks at once, on the
// arena's commit workers), which never holds the arena's lock while the provider commits:
// Alloc goes on meanwhile, commits what it needs itself, and never waits for the precommit
// (but, at capacity, for the one batch holding the chunks it could use). Its progress is the
// arena's Precommitted count, which Usage and Stats read.
type precommit struct {
	mu      sync.Mutex
	running bool
	err     error
	done    chan struct{}
}

// closedChan is PrecommitDone's answer for a pool that asked for no precommit.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// startPrecommit starts committing n bytes in the background (none when n is zero); then is
// called when it ends, if set.
func (p *Pool) startPrecommit(n int64, then func(committed uint64, err error)) {
	if n <= 0 {
		return
	}
	p.pc.running = true
	p.pc.done = make(chan struct{})
	go func() {
		defer close(p.pc.done)
		done, err := p.a.Precommit(uintptr(n))
		if errors.Is(err, arena.ErrClosed) {
			err = nil // the pool closed first: nothing to report
		}
		err = wrapError(err, ErrOutOfMemory)
		p.pc.mu.Lock()
		p.pc.running, p.pc.err = false, err
		p.pc.mu.Unlock()
		if then != nil {
			then(uint64(done), err)
		}
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

// PrecommitDone returns a channel closed when the background commit of Options.Precommit is
// over (at once when none was asked): the ready signal of a pool made at startup. Its error is
// WaitPrecommit's, and its progress meanwhile Usage().Precommitted.
func (p *Pool) PrecommitDone() <-chan struct{} {
	if p.pc.done == nil {
		return closedChan
	}
	return p.pc.done
}

// precommitState reports whether the background commit runs, and its error once over.
func (p *Pool) precommitState() (running bool, err error) {
	p.pc.mu.Lock()
	defer p.pc.mu.Unlock()
	return p.pc.running, p.pc.err
}
