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
// the pool's descriptors (it keeps them open for this). The process then claims the grants
// it holds, by its own record (client.holds), never by the grant words of the control region,
// which any process can write; the owner makes its grants exactly those (claim.go). If the
// owner at the path does not know the process (another pool, or the process was given up),
// or refuses its claims (another process holds one), the process is orphaned: its requests
// fail with ErrClosed from then on, and it should leave.

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
			owed := cl.owed
			cl.owing, cl.owed = false, nil
			cl.rejoined++
			close(cl.up)
			cl.mu.Unlock()
			cl.readers.Add(1)
			go cl.reader(c)
			for _, r := range owed { // given back after the claims, before the answer
				cl.giveBack(c, r.first, r.n)
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

var (
	errOrphaned = errors.New("ipcpool: the owner serving the path does not know this process (another pool, or it gave the process up)")
	errClaimed  = fmt.Errorf("%w: it found a grant this process holds held by another process", errOrphaned)
)

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
	if err == nil && m.op == opReply && m.a == stClaims {
		if _, err = c.Write(cl.claims()); err == nil {
			cl.mu.Lock()
			pause := cl.pauseRejoin
			cl.pauseRejoin = nil
			cl.mu.Unlock()
			if pause != nil {
				pause()
			}
			m, err = readMsg(c)
		}
	} else if err == nil && m.op == opReply && m.a == stOK {
		err = fmt.Errorf("%w: a rejoin taken back without its claims", ErrProtocol)
	}
	switch {
	case err != nil:
		return fail(err)
	case m.op != opReply:
		return fail(fmt.Errorf("%w: operation %d in answer to a rejoin", ErrProtocol, m.op))
	case m.a == stRefused && (m.b == refusedPool || m.b == refusedPid):
		return fail(errOrphaned)
	case m.a == stRefused && m.b == refusedClaim:
		return fail(errClaimed)
	case m.a != stOK:
		return fail(fmt.Errorf("%w: rejoin answered %d", ErrRefused, m.a))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// claims returns the messages of a rejoin's claims: the runs of grants this process holds by
// its own record, ascending, each inside one region, then an empty one. Releases from now on
// find no owner until the rejoin ends: they are owed to the new owner, which counts them as
// claimed.
func (cl *client) claims() []byte {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.owing, cl.owed = true, nil
	per := cl.l.grantsPerRegion()
	var b []byte
	for g := 0; g < len(cl.holds); {
		if !cl.holds[g] {
			g++
			continue
		}
		first := g
		for g++; g < len(cl.holds) && cl.holds[g] && g%per != 0; g++ {
		}
		m := msg{op: opClaim, a: uint64(first), b: uint64(g - first)}.encode()
		b = append(b, m[:]...)
	}
	end := msg{op: opClaim}.encode()
	return append(b, end[:]...)
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

// Rejoined reports how many times the process rejoined a new owner of the pool.
func (p *Process) Rejoined() int {
	if p.cl == nil {
		return 0
	}
	p.cl.mu.Lock()
	defer p.cl.mu.Unlock()
	return p.cl.rejoined
}
