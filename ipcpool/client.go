package ipcpool

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// client is an attached process's connection to the owner: requests go out one message each,
// under wmu; a reader goroutine hands each reply to the request of its sequence number. A
// request waits at most the process's timeout (the owner may be stopped: SIGSTOP), and a
// grant whose reply comes after its request gave up is given straight back.
type client struct {
	c       *net.UnixConn
	timeout time.Duration
	grants  int // the pool's grants, to check what the owner grants
	perReg  int

	wmu     sync.Mutex
	mu      sync.Mutex
	seq     uint64
	pending map[uint64]*call
	late    map[uint64]uint64 // grant requests that gave up: their grants' count
	gone    chan struct{}     // closed when the connection ends
	err     error             // why, once gone is closed
}

// call is a request waiting for its reply.
type call struct {
	op, n uint64
	reply chan msg
}

func newClient(c *net.UnixConn, timeout time.Duration, l layout) *client {
	cl := &client{c: c, timeout: timeout, grants: l.grants(), perReg: l.grantsPerRegion(),
		pending: map[uint64]*call{}, gone: make(chan struct{})}
	return cl
}

// start starts the reader, once the handshake is done.
func (cl *client) start() { go cl.reader() }

// reader hands replies to their requests until the connection ends.
func (cl *client) reader() {
	var err error
	for {
		var m msg
		if m, err = readMsg(cl.c); err != nil {
			break
		}
		if m.op != opReply {
			err = fmt.Errorf("%w: the owner sent operation %d", ErrProtocol, m.op)
			break
		}
		cl.mu.Lock()
		k := cl.pending[m.seq]
		delete(cl.pending, m.seq)
		cl.mu.Unlock()
		switch {
		case k != nil:
			k.reply <- m
		default:
			// A grant whose request gave up: it is this process's, unknown to its arena.
			if n := cl.lateN(m.seq); n > 0 && m.a == stOK && m.b < uint64(cl.grants) {
				_ = cl.send(msg{op: opRelease, a: m.b, b: uint64(n)})
			}
		}
	}
	cl.mu.Lock()
	cl.err = err
	cl.pending = nil // requests now fail at once; those waiting see gone
	cl.mu.Unlock()
	close(cl.gone)
}

// lateN is how many grants the late reply to request seq granted: recorded when it gave up.
func (cl *client) lateN(seq uint64) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := int(cl.late[seq])
	delete(cl.late, seq)
	return n
}

// send writes m (no reply expected).
func (cl *client) send(m msg) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	return writeMsg(cl.c, m, cl.timeout)
}

// request sends a request and waits for its reply, at most d.
func (cl *client) request(op, a, b uint64, d time.Duration) (msg, error) {
	k := &call{op: op, n: a, reply: make(chan msg, 1)}
	cl.mu.Lock()
	cl.seq++
	seq := cl.seq
	if cl.pending == nil {
		cl.mu.Unlock()
		return msg{}, fmt.Errorf("%w: the connection to the owner is closed", ErrClosed)
	}
	cl.pending[seq] = k
	cl.mu.Unlock()
	if err := cl.send(msg{op: uint32(op), seq: seq, a: a, b: b}); err != nil {
		cl.forget(seq, k)
		return msg{}, fmt.Errorf("%w: the owner: %w", ErrClosed, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-k.reply:
		return m, nil
	case <-cl.gone:
		select {
		case m := <-k.reply: // the reply came before the end
			return m, nil
		default:
		}
		return msg{}, fmt.Errorf("%w: the owner closed the connection: %v", ErrClosed, cl.err)
	case <-t.C:
		cl.forget(seq, k)
		select {
		case m := <-k.reply: // came as it gave up
			return m, nil
		default:
		}
		return msg{}, fmt.Errorf("ipcpool: no answer from the owner within %v: %w", d, context.DeadlineExceeded)
	}
}

// forget drops request seq, which gave up; a grant's late reply is given back (reader).
func (cl *client) forget(seq uint64, k *call) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.pending != nil {
		delete(cl.pending, seq)
	}
	if k.op == opGrant {
		if cl.late == nil {
			cl.late = map[uint64]uint64{}
		}
		cl.late[seq] = k.n
	}
}

// grant implements granter: one request, waiting at most the timeout.
func (cl *client) grant(n int) (int, error) {
	m, err := cl.request(opGrant, uint64(n), uint64(cl.timeout), cl.timeout+cl.timeout/4)
	if err != nil {
		return 0, err
	}
	switch {
	case m.a == stFull:
		return 0, fmt.Errorf("%w: %d grants asked", ErrPoolFull, n)
	case m.a != stOK:
		return 0, fmt.Errorf("%w: %d grants refused", ErrRefused, n)
	case m.b >= uint64(cl.grants) || int(m.b)%cl.perReg+n > cl.perReg:
		// Not a run of the pool: refuse it (nothing was mapped for it) and cut the owner off.
		cl.c.Close()
		return 0, fmt.Errorf("%w: the owner granted %d grants at %d", ErrProtocol, n, m.b)
	}
	return int(m.b), nil
}

// release implements granter: one message, no reply.
func (cl *client) release(first, n int) {
	_ = cl.send(msg{op: opRelease, a: uint64(first), b: uint64(n)})
}

// detach tells the owner this process has left, and waits for it to take the memory back.
func (cl *client) detach() error {
	m, err := cl.request(opDetach, 0, 0, cl.timeout)
	if err == nil && m.a != stOK {
		err = fmt.Errorf("%w: the owner refused the detach", ErrProtocol)
	}
	return err
}

func (cl *client) close() {
	cl.c.Close()
	<-cl.gone
}
