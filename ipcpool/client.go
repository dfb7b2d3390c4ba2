package ipcpool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// client is an attached process's connection to the owner. Messages go out one at a time,
// under the write lock (wlock), which a request waits for no longer than its deadline; a
// reader goroutine hands each reply to the request of its sequence number. A request waits at
// most the process's timeout (the owner may be stopped: SIGSTOP), and a grant whose reply
// comes after its request gave up is given straight back.
//
// When the connection ends without the process leaving (the owner died), the client rejoins
// whatever owner serves the path next, keeping its slot, its grants and its
// handles; requests made meanwhile wait for it, within their deadline.
//
// The client keeps its own record of the grants it holds (holds: every run an owner lent it,
// less those it gave back), in Go memory where no other process can write: a rejoin claims
// exactly those from the new owner (rejoin.go), whatever the control region's grant words say.
type client struct {
	path    string
	timeout time.Duration
	uids    []int
	l       layout
	pool    uint64
	slot    int
	serial  uint64
	donate  func(send func(fds []int) error) (bool, error) // the pool's descriptors, for a new owner (adopt.go; space.donate)

	wlock    chan struct{} // the write lock: holds a token while a message is being written
	mu       sync.Mutex
	c        *net.UnixConn // nil while no owner serves this process
	up       chan struct{} // closed when c is set again
	closing  bool
	orphaned error // set when no owner will know this process again
	seq      uint64
	pending  map[uint64]*call
	late     map[uint64]uint64 // grant requests that gave up on c, awaiting their reply: their grants' count
	holds    []bool            // by grant: lent to this process and not given back
	owing    bool              // a rejoin has sent its claims: releases with no owner are owed to it
	owed     []run             // the runs given back since the claims, while no owner served
	holding  bool              // releases are held back (holdReleases): the process is leaving
	heldBack []run             // the releases held back, in order, their grants still in holds
	resendOn *net.UnixConn     // the connection resend sends unsent on (nil: none)
	unsent   []run             // releases whose message timed out on resendOn, in order
	readers  sync.WaitGroup
	rejoined int // how many times it rejoined a new owner
	// pause, set by tests only (under mu), runs once as the reader hands a reply to its
	// request; pauseRejoin as a rejoin has sent its claims and waits for the answer.
	pause       func(m msg)
	pauseRejoin func()
}

// run is grants [first, first+n).
type run struct{ first, n int }

// call is a request waiting for its reply.
type call struct {
	op, n uint64
	reply chan msg
	lost  chan struct{} // closed when its connection ended before the reply
}

func newClient(c *net.UnixConn, path string, timeout time.Duration, uids []int, h hello) *client {
	return &client{c: c, path: path, timeout: timeout, uids: uids, l: h.layout, pool: h.pool, slot: h.slot,
		serial: h.serial, pending: map[uint64]*call{}, up: make(chan struct{}),
		holds: make([]bool, h.grants()), wlock: make(chan struct{}, 1)}
}

// start starts the reader of the current connection, once the handshake is done.
func (cl *client) start() {
	cl.mu.Lock()
	c := cl.c
	close(cl.up)
	cl.mu.Unlock()
	cl.readers.Add(1)
	go cl.reader(c)
}

// reader hands replies on c to their requests until c ends.
func (cl *client) reader(c *net.UnixConn) {
	defer cl.readers.Done()
	for {
		m, err := readMsg(c)
		if err != nil || m.op != opReply {
			break
		}
		cl.mu.Lock()
		k := cl.pending[m.seq]
		delete(cl.pending, m.seq)
		n := cl.late[m.seq]
		delete(cl.late, m.seq)
		pause := cl.pause
		if k != nil {
			cl.pause = nil
			if k.op == opGrant && m.a == stOK && cl.l.validRun(m.b, k.n) {
				// Lent: this process's from now on (its request takes it or gives it back).
				for g := m.b; g < m.b+k.n; g++ {
					cl.holds[g] = true
				}
			}
		}
		cl.mu.Unlock()
		switch {
		case k != nil:
			if pause != nil {
				pause(m)
			}
			k.reply <- m // (a request that gives up now waits for it: forget)
		case n > 0 && m.a == stOK && cl.l.validRun(m.b, n):
			// A grant whose request gave up: never this process's record's, nor its arena's.
			cl.giveBack(c, int(m.b), int(n))
		}
	}
	c.Close()
	cl.mu.Lock()
	if cl.c == c {
		cl.c = nil
		cl.up = make(chan struct{})
	}
	for seq, k := range cl.pending {
		close(k.lost)
		delete(cl.pending, seq)
	}
	// The requests that gave up on c get no reply now: nothing of theirs to give back (what
	// c's owner lent them is in no record of this process's, and a rejoin claims none of it).
	clear(cl.late)
	if cl.resendOn == c { // a rejoin claims by the record, which has these given back already
		cl.resendOn, cl.unsent = nil, nil
	}
	closing := cl.closing
	cl.mu.Unlock()
	if !closing {
		cl.readers.Add(1)
		go cl.rejoinLoop()
	}
}

// sendOn writes m on c (no reply expected).
func (cl *client) sendOn(c *net.UnixConn, m msg) error {
	cl.wlock <- struct{}{}
	defer cl.unlockWrite()
	return writeMsg(c, m, cl.timeout)
}

// sendBy writes m on c, waiting for the write lock and for the owner to take it not past end
// (a request's deadline), and for the owner at most the timeout. Past end it writes nothing
// and returns os.ErrDeadlineExceeded.
func (cl *client) sendBy(c *net.UnixConn, m msg, end time.Time) error {
	if !cl.lockWriteBy(end) {
		return os.ErrDeadlineExceeded
	}
	defer cl.unlockWrite()
	d := min(cl.timeout, time.Until(end))
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	return writeMsg(c, m, d)
}

// lockWriteBy takes the write lock, waiting for it until end at most, and reports whether it
// has it. A release being sent (or sent again) holds it up to the timeout.
func (cl *client) lockWriteBy(end time.Time) bool {
	select {
	case cl.wlock <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case cl.wlock <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// unlockWrite lets the write lock go.
func (cl *client) unlockWrite() { <-cl.wlock }

// request sends a request and waits for its reply, at most d: across an owner's restart too
// (the request waits for the rejoin, and is sent again to the new owner if its connection
// ended before the reply). A request whose message the owner does not take within the
// timeout or by its deadline, whichever comes first (its socket full), fails, and the
// connection stays.
func (cl *client) request(op, a, b uint64, d time.Duration) (msg, error) {
	end := time.Now().Add(d)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	late := func() (msg, error) {
		return msg{}, fmt.Errorf("ipcpool: no answer from the owner within %v: %w", d, context.DeadlineExceeded)
	}
	for {
		cl.mu.Lock()
		c, up := cl.c, cl.up
		switch {
		case cl.closing:
			cl.mu.Unlock()
			return msg{}, fmt.Errorf("%w: the process left the pool", ErrClosed)
		case cl.orphaned != nil:
			cl.mu.Unlock()
			return msg{}, cl.orphaned
		case c == nil:
			cl.mu.Unlock()
			select {
			case <-up:
				continue
			case <-deadline.C:
				return late()
			}
		}
		cl.seq++
		seq := cl.seq
		k := &call{op: op, n: a, reply: make(chan msg, 1), lost: make(chan struct{})}
		cl.pending[seq] = k
		cl.mu.Unlock()
		if err := cl.sendBy(c, msg{op: uint32(op), seq: seq, a: a, b: b}, end); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				cl.dropUnsent(seq, k)
				// Nothing written (writeMsg): the owner reads nothing (stopped, or busy). The
				// connection stays: closed, it would leave a healthy process orphaned, as the
				// owner, alive, takes no rejoin from a process it still knows.
				if !time.Now().Before(end) {
					return late() // the write waited until the request's deadline
				}
				return msg{}, fmt.Errorf("ipcpool: the owner read no request within %v: %w",
					cl.timeout, context.DeadlineExceeded)
			}
			if writeFailed(c, err) {
				cl.dropUnsent(seq, k)
				continue
			}
			// k waits for c's reader to end (k.lost), once it has read what the owner wrote
			// before, the answers to other requests among them.
		}
		select {
		case m := <-k.reply:
			return m, nil
		case <-k.lost:
			select {
			case m := <-k.reply: // the reply came before the end
				return m, nil
			default:
			}
			continue // the owner went: ask the next one
		case <-deadline.C:
			if cl.forget(seq, k) {
				return late() // a grant's reply, should it come, is given back (reader)
			}
			select {
			case m := <-k.reply: // the reader has it in hand: it comes now
				return m, nil
			case <-k.lost:
				return late()
			}
		}
	}
}

// forget drops request seq, which gave up, and reports whether it was still waiting: a
// grant's late reply is given back then (reader). Otherwise the reader took its reply (it is
// on its way to k.reply) or its connection ended (k.lost).
func (cl *client) forget(seq uint64, k *call) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.pending[seq] != k {
		return false
	}
	delete(cl.pending, seq)
	if k.op == opGrant {
		if cl.late == nil {
			cl.late = map[uint64]uint64{}
		}
		cl.late[seq] = k.n
	}
	return true
}

// dropUnsent drops request seq, whose message was not sent: no reply comes.
func (cl *client) dropUnsent(seq uint64, k *call) {
	cl.mu.Lock()
	if cl.pending[seq] == k {
		delete(cl.pending, seq)
	}
	cl.mu.Unlock()
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
	case !cl.l.validRun(m.b, uint64(n)):
		// Not a run of the pool (the reader did not record it): refuse it (nothing was
		// mapped for it) and cut the owner off.
		cl.refuse(nil)
		return 0, fmt.Errorf("%w: the owner granted %d grants at %d", ErrProtocol, n, m.b)
	}
	return int(m.b), nil
}

// refuse implements granter: it cuts the owner off (its reader ends; a rejoin follows).
func (cl *client) refuse(drop []int) {
	cl.mu.Lock()
	for _, g := range drop {
		if g >= 0 && g < len(cl.holds) {
			cl.holds[g] = false
		}
	}
	if cl.c != nil {
		cl.c.Close()
	}
	cl.mu.Unlock()
}

// release implements granter: one message, no reply. The grants leave the process's record
// at once. With no owner the message is not sent: the next rejoin does not claim them (the
// new owner takes them back), or, given back after its claims, they are owed to it.
func (cl *client) release(first, n int) {
	cl.mu.Lock()
	if cl.holding {
		cl.heldBack = append(cl.heldBack, run{first, n})
		cl.mu.Unlock()
		return
	}
	if first >= 0 && n > 0 && n <= len(cl.holds)-first {
		clear(cl.holds[first : first+n])
	}
	c := cl.c
	if c == nil && cl.owing {
		cl.owed = append(cl.owed, run{first, n})
	}
	cl.mu.Unlock()
	if c != nil {
		cl.giveBack(c, first, n)
	}
}

// holdReleases holds back the releases from now on, unsent and their grants still in the
// process's record, until sendHeld sends them: a leaving process gives its grants back only
// once it knows it maps them no more (leaveAll). Never sent, they are the owner's to take back
// at the detach, or when the process exits.
func (cl *client) holdReleases() {
	cl.mu.Lock()
	cl.holding = true
	cl.mu.Unlock()
}

// sendHeld sends the releases held back, in order, and holds no more.
func (cl *client) sendHeld() {
	cl.mu.Lock()
	runs := cl.heldBack
	cl.holding, cl.heldBack = false, nil
	cl.mu.Unlock()
	for _, r := range runs {
		cl.release(r.first, r.n)
	}
}

// giveBack gives grants [first, first+n) back on c. A message that times out (the owner
// reads nothing: it is stopped, or busy) is sent again, in order, on c, until it goes or c
// ends (resend): the owner would count the grants as the process's until it left. Once c has
// ended, a rejoin claims by the record, which has them given back. Another error is
// writeFailed's.
func (cl *client) giveBack(c *net.UnixConn, first, n int) {
	cl.mu.Lock()
	if cl.resendOn == c { // after those waiting to be sent again
		cl.unsent = append(cl.unsent, run{first, n})
		cl.mu.Unlock()
		return
	}
	cl.mu.Unlock()
	err := cl.sendOn(c, msg{op: opRelease, a: uint64(first), b: uint64(n)})
	if err == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case cl.c != c || cl.closing:
		// Ended: nothing to send it on.
	case !errors.Is(err, os.ErrDeadlineExceeded):
		writeFailed(c, err)
	case cl.resendOn == c:
		cl.unsent = append(cl.unsent, run{first, n})
	default:
		cl.resendOn, cl.unsent = c, append(cl.unsent[:0], run{first, n})
		cl.readers.Add(1)
		go cl.resend(c)
	}
}

// writeFailed takes a message written on c that failed with err, not for its deadline (a
// request, a release), and reports whether it ended c: only when part of the message went
// (errPartial), as the owner would read a torn one. Another error (a broken pipe, a reset)
// says the owner has closed its end, or c is closed: c's reader ends by itself once it has
// read what the owner wrote before that, and the client rejoins then. Closed here, c would
// lose those answers: the answer to a detach, when the answer to a grant request that gave up
// came just before it and the owner was gone by the time the reader gave that grant back, or
// when an Alloc's request met the closed owner (a Close that failed, the process taken for
// orphaned: TestLateGrantGivenBackAsOwnerLeaves, TestRequestAfterOwnerClosedKeepsAnswers). A
// release lost so is the owner's to take back as the process leaves.
func writeFailed(c *net.UnixConn, err error) bool {
	if !errors.Is(err, errPartial) {
		return false
	}
	c.Close() // its reader ends, and the client rejoins
	return true
}

// resend sends the releases that timed out on c again, until they have gone or c ends.
func (cl *client) resend(c *net.UnixConn) {
	defer cl.readers.Done()
	for {
		cl.mu.Lock()
		if cl.resendOn != c {
			cl.mu.Unlock()
			return
		}
		if len(cl.unsent) == 0 {
			cl.resendOn = nil
			cl.mu.Unlock()
			return
		}
		r := cl.unsent[0]
		cl.mu.Unlock()
		// (It waits up to the timeout for the owner to read: no spin.)
		err := cl.sendOn(c, msg{op: opRelease, a: uint64(r.first), b: uint64(r.n)})
		cl.mu.Lock()
		if cl.resendOn != c {
			cl.mu.Unlock()
			return
		}
		switch {
		case err == nil:
			cl.unsent = cl.unsent[1:]
		case !errors.Is(err, os.ErrDeadlineExceeded):
			cl.resendOn, cl.unsent = nil, nil
			writeFailed(c, err)
		}
		cl.mu.Unlock()
	}
}

// detach tells the owner this process has left, and waits for it to take the memory back; with
// kept, that the process still maps the pool's memory (a VMM mapping the driver refused to
// unmap): the owner keeps its grants from every other process until it exits.
func (cl *client) detach(kept bool) error {
	var a uint64
	if kept {
		a = detachKept
	}
	m, err := cl.request(opDetach, a, 0, cl.timeout)
	if err == nil && m.a != stOK {
		err = fmt.Errorf("%w: the owner refused the detach", ErrProtocol)
	}
	return err
}

// close ends the client: no rejoin from now on.
func (cl *client) close() {
	cl.hangUp()
	cl.readers.Wait()
}
