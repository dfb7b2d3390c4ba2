package ipcpool

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Rejoining: when an attached process's connection ends without it leaving, its owner died
// (or closed it). The process keeps everything it has mapped and holds (its pool works on the
// grants it holds, frees by handle go on through the rings) and tries, every little while,
// the path again: a new owner that serves it adopts the pool (Options.Adopt) and knows the
// process by its slot and serial. If the new owner has no memory yet, the process hands it
// the pool's descriptors (it keeps them open for this). If the owner at the path does not
// know the process (another pool, or the process was given up), the process is orphaned:
// its requests fail with ErrClosed from then on, and it should leave.

// rejoinBackoff bounds the wait between two tries: a new owner waits at most about that long
// for a process to come and hand it the pool (a failed connect costs microseconds).
const rejoinBackoff = 2 * time.Millisecond

// rejoinLoop tries to rejoin until it does, the process leaves, or it is orphaned.
func (cl *client) rejoinLoop() {
	defer cl.readers.Done()
	wait := 100 * time.Microsecond
	for {
		cl.mu.Lock()
		closing := cl.closing
		cl.mu.Unlock()
		if closing {
			return
		}
		c, err := cl.rejoin()
		if err == nil {
			cl.mu.Lock()
			if cl.closing {
				cl.mu.Unlock()
				c.Close()
				return
			}
			cl.c = c
			clear(cl.given)
			cl.rejoined++
			close(cl.up)
			cl.mu.Unlock()
			cl.readers.Add(1)
			go cl.reader(c)
			if cl.pauseRejoin != nil {
				cl.pauseRejoin()
			}
			if cl.reconcile != nil {
				cl.reconcile()
			}
			return
		}
		if errors.Is(err, errOrphaned) {
			cl.mu.Lock()
			cl.orphaned = fmt.Errorf("%w: %w", ErrClosed, err)
			close(cl.up) // requests waiting see it
			cl.mu.Unlock()
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, rejoinBackoff)
	}
}

var errOrphaned = errors.New("ipcpool: the owner serving the path does not know this process (another pool, or it gave the process up)")

// rejoin makes one try: the connection to the new owner, once it took the process back.
func (cl *client) rejoin() (*net.UnixConn, error) {
	nc, err := net.DialTimeout("unix", cl.path, cl.timeout)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.UnixConn)
	fail := func(err error) (*net.UnixConn, error) {
		c.Close()
		return nil, err
	}
	if err := checkServer(c, cl.uids); err != nil {
		return fail(err) // an impostor at the path: try again later
	}
	_ = c.SetDeadline(time.Now().Add(cl.timeout))
	if err := writeMsg(c, msg{op: opIntro, flags: introRejoin, seq: wireVersion, a: ctlMagic, b: cl.pool}, 0); err != nil {
		return fail(err)
	}
	if err := writeMsg(c, msg{op: opRejoin, a: uint64(cl.slot), b: cl.serial}, 0); err != nil {
		return fail(err)
	}
	m, err := readMsg(c)
	if err == nil && m.op == opReply && m.a == stDonate && cl.donate != nil {
		b := msg{op: opDonate}.encode()
		var sent bool
		sent, err = cl.donate(func(fds []int) error { return sendFds(c, b[:], fds, cl.timeout) })
		if err == nil && !sent {
			err = fmt.Errorf("%w: the process is leaving: its pool's descriptors are closed", ErrClosed)
		}
		if err == nil {
			m, err = readMsg(c)
		}
	}
	switch {
	case err != nil:
		return fail(err)
	case m.op != opReply:
		return fail(fmt.Errorf("%w: operation %d in answer to a rejoin", ErrProtocol, m.op))
	case m.a == stRefused && m.b == refusedPool:
		return fail(errOrphaned)
	case m.a != stOK:
		return fail(fmt.Errorf("%w: rejoin answered %d", ErrRefused, m.a))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// hangUp closes the connection for good, as a process that stops talking to the owner does:
// no rejoin (tests).
func (cl *client) hangUp() {
	cl.mu.Lock()
	cl.closing = true
	if cl.c != nil {
		cl.c.Close()
	}
	cl.mu.Unlock()
}

// reconcileGrants gives back the grants the table says this process holds that its arena
// does not know: a grant the previous owner lent as it died, before its answer came, and
// those the arena gave back while no owner ran; not those it gave back to the new owner
// since the rejoin (source.Release holds lending across its part: a release is either seen
// here as given back, or comes after, of a grant still held). A
// process closing (its Close may have unmapped the pool already, and waits to detach from
// the owner rejoined) has nothing to reconcile: its grants go back with it.
func (p *Process) reconcileGrants() {
	if !p.enter() {
		return
	}
	defer p.exit()
	p.src.lending.Lock()
	defer p.src.lending.Unlock()
	c := &p.c
	first, n := -1, 0
	flush := func() {
		if n > 0 {
			p.cl.release(first, n)
		}
		first, n = -1, 0
	}
	for g := range p.grants() {
		_, _, slot := unpackGrant(c.load(c.grantWord(g)))
		extra := slot == p.slot && !p.src.holds(uintptr(g)*p.grantSize) && !p.cl.givenBack(g)
		switch {
		case extra && n > 0 && first+n == g && g%p.grantsPerRegion() != 0:
			n++
		case extra:
			flush()
			first, n = g, 1
		default:
			flush()
		}
	}
	flush()
}

// Rejoined reports how many times the process rejoined a new owner of the pool.
func (p *Process) Rejoined() int {
	if p.cl == nil {
		return 0
	}
	p.cl.mu.Lock()
	defer p.cl.mu.Unlock()
	return p.cl.rejoined
}
