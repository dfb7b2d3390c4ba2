package pinned

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
)

// precommit is the state of the background commit that Options.Precommit asks for. The
// goroutine commits batch by batch through arena.Precommit (several chunks at once, on the
// arena's commit workers), which never holds the arena's lock while the provider commits:
// Alloc goes on meanwhile, commits what it needs itself, and never waits for the precommit
// (but, at capacity, for the one batch holding the chunks it could use). Its progress is the
// arena's Precommitted count, which Usage and Stats read.
//
// OnPrecommit runs on the precommit's goroutine before done is closed, so that WaitPrecommit
// returns after it. It may call any Pool method: WaitPrecommit and PrecommitDone, called from
// it (its goroutine is cbG), answer at once as if done were closed. A panic in it is recovered
// and joined to the precommit's error.
type precommit struct {
	mu      sync.Mutex
	running bool
	err     error
	done    chan struct{}
	cbG     atomic.Uint64 // the goroutine running OnPrecommit; 0 when none runs
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
			p.callOnPrecommit(then, uint64(done), err)
		}
	}()
}

// callOnPrecommit calls then as the precommit's callback (see precommit), recovering a panic
// into the precommit's error.
func (p *Pool) callOnPrecommit(then func(uint64, error), done uint64, err error) {
	p.pc.cbG.Store(goroutineID())
	defer func() {
		p.pc.cbG.Store(0)
		if r := recover(); r != nil {
			p.pc.mu.Lock()
			p.pc.err = errors.Join(p.pc.err, fmt.Errorf("%w: Options.OnPrecommit panicked: %v", ErrInvalidOptions, r))
			p.pc.mu.Unlock()
		}
	}()
	then(done, err)
}

// inCallback reports whether the caller is the OnPrecommit callback's goroutine.
func (p *Pool) inCallback() bool {
	g := p.pc.cbG.Load()
	return g != 0 && g == goroutineID()
}

// WaitPrecommit waits until the background commit of Options.Precommit is over and returns its
// error: the first commit the system or driver refused (it stops there), nil when it committed
// what was asked, or stopped at the capacity. It returns nil at once when none was asked.
func (p *Pool) WaitPrecommit() error {
	if p.pc.done == nil {
		return nil
	}
	if !p.inCallback() {
		<-p.pc.done
	}
	p.pc.mu.Lock()
	defer p.pc.mu.Unlock()
	return p.pc.err
}

// PrecommitDone returns a channel closed when the background commit of Options.Precommit is
// over (at once when none was asked): the ready signal of a pool made at startup. Its error is
// WaitPrecommit's, and its progress meanwhile Usage().Precommitted.
func (p *Pool) PrecommitDone() <-chan struct{} {
	if p.pc.done == nil || p.inCallback() {
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
