package ipcpool

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The owner's side of one connection. The handshake has one deadline (a peer that has not
// finished it within Options.Timeout of its connection, or of the owner's serving when it
// connected during an adoption's wait, is closed), every message is checked (a peer that sends
// garbage is cut off), and a connection that fails before it answered the hello frees its
// slot at once: it was granted nothing.

// Reasons in a refusal (a reply to the intro, status stRefused).
const (
	refusedUser  = 1 // the peer's user may not attach
	refusedFull  = 2 // no slot free, or the pool is closing
	refusedKind  = 3 // the owner does not serve that kind of connection now
	refusedPool  = 4 // (a rejoin) the owner does not know this process: another pool, or it left
	refusedClaim = 5 // (a rejoin) the process claims a grant another holds (claim.go)
	refusedPid   = 6 // the peer's pid is none the owner sees (another pid namespace)
	refusedLate  = 7 // (the answer to an attach's intro or ready) the handshake took longer than Options.Timeout
)

// clientCred returns the credentials of the process at the other end of a connection the
// owner accepted (peerCred; tests replace it).
var clientCred = peerCred

// sessionStarts, set by tests only, runs as a session's goroutine begins: a session the
// scheduler runs late.
var sessionStarts func()

// session serves one connection, accepted at start (and put in noSlot and unnamed then, by
// serve): its handshake's deadline, and whether it came before the rejoins' deadline, count
// from then, however late the session runs.
func (w *Owner) session(c *net.UnixConn, start time.Time) {
	if sessionStarts != nil {
		sessionStarts()
	}
	defer w.wg.Done()
	defer c.Close()
	defer func() {
		w.mu.Lock()
		delete(w.noSlot, c)
		delete(w.unnamed, c)
		w.mu.Unlock()
	}()
	cred, err := clientCred(c)
	w.handshakeDeadline(c, start)
	if err != nil {
		return
	}
	w.mu.Lock()
	allowed := w.allow[int(cred.Uid)]
	w.mu.Unlock()
	if !allowed {
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedUser}, w.timeout)
		return
	}
	if cred.Pid <= 0 {
		// A process of another pid namespace, whose pid the kernel gives the owner as 0: the
		// owner could not watch it, and would take it to have exited as soon as it left its
		// socket, lending its memory again while it may still use it.
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedPid}, w.timeout)
		return
	}
	intro, err := readMsg(c)
	if err != nil || intro.op != opIntro {
		return // garbage or silence: nothing was taken
	}
	switch intro.flags {
	case introAttach:
		w.mu.Lock()
		delete(w.unnamed, c) // names no slot of the previous owner's
		w.mu.Unlock()
		serving, late, from := w.waitServing(start)
		if !serving {
			why := uint64(refusedKind) // Serve failed, or the owner closed: nothing is served
			if late {
				why = refusedLate // a timeout: no refusal
			}
			_ = writeMsg(c, msg{op: opReply, a: stRefused, b: why}, w.timeout)
			return
		}
		_ = c.SetReadDeadline(from.Add(w.timeout))
		w.attachSession(c, cred)
	case introRejoin:
		w.rejoinSession(c, cred, intro.b, start)
	default:
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedKind}, w.timeout)
	}
}

// handshakeDeadline sets the read deadline of c, accepted at start, for its handshake
// (handshakeFrom). Under w.mu, so that it never undoes a move (moveDeadlines).
func (w *Owner) handshakeDeadline(c *net.UnixConn, start time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = c.SetReadDeadline(w.handshakeFrom(start).Add(w.timeout))
}

// handshakeFrom returns when the handshake of a connection accepted at start has its
// Options.Timeout run from: its start, or the owner's serving when it connected while the owner
// waited for a pool to adopt (the wait's end until it serves: moveDeadlines brings it to the
// serving then). Called with w.mu held.
func (w *Owner) handshakeFrom(start time.Time) time.Time {
	switch {
	case w.adopting && start.Before(w.adoptEnd):
		return w.adoptEnd
	case start.Before(w.servedAt):
		return w.servedAt
	}
	return start
}

// unnamedInTime reports whether a connection accepted before the rejoins' deadline has not yet
// said what it is (unnamed): it may still name a slot of the previous owner's, or claim what
// the words hold back. Called with w.mu held.
func (w *Owner) unnamedInTime() bool {
	for _, at := range w.unnamed {
		if at.Before(w.rejoinBy) {
			return true
		}
	}
	return false
}

// moveDeadlines gives the connections accepted while the owner waited for a pool to adopt,
// and still to say what they are, Options.Timeout from the owner's serving for their
// handshake, as it begins to serve (servedAt). Called with w.mu held.
func (w *Owner) moveDeadlines() {
	for c, at := range w.unnamed {
		if at.Before(w.servedAt) {
			_ = c.SetReadDeadline(w.servedAt.Add(w.timeout))
		}
	}
}

// waitServing waits, while the owner waits for the memory of the pool it adopts, until the
// handshake's deadline at most (handshakeFrom: Options.Timeout past the wait's end for a
// connection that came during it, however long the wait), and reports whether it serves now,
// whether the handshake's deadline came first (late: the owner still adopting or making its
// pool, not closed), and when the handshake of a connection that began at start has its
// deadline run from: its start, or the owner's serving when it connected during the wait,
// whether or not its session saw the wait (Options.Timeout).
func (w *Owner) waitServing(start time.Time) (serving, late bool, from time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.adopting && !w.closed {
		end := w.handshakeFrom(start).Add(w.timeout)
		t := time.AfterFunc(time.Until(end), func() {
			w.mu.Lock()
			w.cond.Broadcast()
			w.mu.Unlock()
		})
		defer t.Stop()
		for w.adopting && !w.closed && time.Now().Before(end) {
			w.cond.Wait()
		}
	}
	return !w.adopting && !w.closed, w.adopting && !w.closed, w.handshakeFrom(start)
}

// rejoinSession takes back a process of the previous owner of a pool this owner adopted, by
// its slot and serial (and pid): asking it for the pool's descriptors first when the owner
// has no memory yet. A rejoin whose connection came before the rejoins' deadline (rejoinBy)
// has its own handshake's deadline to end: the slot it names waits for it (rejoining).
func (w *Owner) rejoinSession(c *net.UnixConn, cred *unix.Ucred, pool uint64, start time.Time) {
	m, err := readMsg(c)
	if err != nil || m.op != opRejoin {
		return
	}
	w.mu.Lock()
	has := w.Process != nil
	w.mu.Unlock()
	if !has {
		if ok, _ := w.donated(c); !ok {
			return // cut off; the owner waits for another donor
		}
	}
	slot, serial := int(m.a), m.b
	w.mu.Lock()
	ours := pool == w.hello.pool && !w.closed
	l := w.hello.layout
	// Only a connection that came in time holds the slot back: a bounded wait (its deadline,
	// Options.Timeout past the rejoins' at most) however many tries a peer makes.
	waits := ours && slot > 0 && slot < len(w.procs) && w.procs[slot].rejoin &&
		start.Before(w.rejoinBy)
	if waits {
		w.procs[slot].rejoining++
	}
	due := ours && start.Before(w.rejoinBy) // its claims may keep what the words hold back
	if due {
		w.claiming++
	}
	delete(w.unnamed, c) // the slot it names waits for it, or it holds none
	w.mu.Unlock()
	if !ours {
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedPool}, w.timeout)
		return
	}
	ended := func() { // called with w.mu held
		if waits {
			waits = false
			w.procs[slot].rejoining--
		}
		if due {
			due = false
			w.claiming--
		}
	}
	defer func() {
		if due { // cut off before its claims were decided (a rejoin that waits is due)
			w.mu.Lock()
			ended()
			w.mu.Unlock()
		}
	}()
	// A process of this pool: its claims, even when it is refused below (keepClaims).
	if err := writeMsg(c, msg{op: opReply, a: stClaims}, w.timeout); err != nil {
		return
	}
	claims, err := readClaims(c, l) // (within the handshake's deadline)
	if err != nil {
		return // garbage or silence: cut off; the slot waits for another try until it expires
	}
	w.mu.Lock()
	ended()
	ok := w.mayRejoin(pool, slot, serial, cred) // (given up meanwhile, or taken by another try)
	if ok {
		if err = w.takeClaims(slot, claims); err == nil {
			st := &w.procs[slot]
			st.rejoin, st.active, st.conn = false, true, c
			delete(w.noSlot, c) // the slot's now: a leave or Close cuts it
		}
	}
	if !ok || err != nil {
		w.keepClaims(claims, int(cred.Pid))
	}
	w.settleUnclaimed()
	w.mu.Unlock()
	switch {
	case !ok:
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedPool}, w.timeout)
		return
	case err != nil:
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedClaim}, w.timeout)
		return
	}
	wa := watchProcess(int(cred.Pid))
	_ = c.SetReadDeadline(time.Time{})
	if err := writeMsg(c, msg{op: opReply, a: stOK}, w.timeout); err != nil {
		c.Close()
	}
	w.serveProcess(c, slot, wa)
}

// mayRejoin reports whether the process of cred may rejoin in slot with serial: a process of
// the previous owner of pool, not rejoined yet, by its pid. Called with w.mu held.
func (w *Owner) mayRejoin(pool uint64, slot int, serial uint64, cred *unix.Ucred) bool {
	if pool != w.hello.pool || slot <= 0 || slot >= len(w.procs) || w.closed {
		return false
	}
	st := &w.procs[slot]
	return st.used && st.rejoin && st.serial == serial && w.c.slotLoad(slot, sPid) == uint64(cred.Pid)
}

// attachSession serves a process that attaches: the hello, then its requests, until it
// detaches, dies, or breaks the protocol.
func (w *Owner) attachSession(c *net.UnixConn, cred *unix.Ucred) {
	slot := w.takeSlot(c, cred)
	if slot < 0 {
		_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedFull}, w.timeout)
		return
	}
	wa := watchProcess(int(cred.Pid))
	h := w.hello
	w.mu.Lock()
	h.slot, h.serial = slot, w.procs[slot].serial
	w.mu.Unlock()
	err := sendFds(c, h.encode(), w.sp.fds, w.timeout)
	var ready msg
	if err == nil {
		ready, err = readMsg(c) // within the handshake's deadline
	}
	if err == nil && ready.op == opReady {
		// The answer to ready: the process is attached only once it has read it, so that a
		// ready the owner gave up waiting for fails the Attach too.
		err = writeMsg(c, msg{op: opReply, a: stOK}, w.timeout)
	}
	if err != nil || ready.op != opReady {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Given up for its time: said, so that the process knows a timeout from a refusal
			// (it may still read it as it sends a ready too late).
			_ = writeMsg(c, msg{op: opReply, a: stRefused, b: refusedLate}, w.timeout)
		}
		// It failed before it could use anything (a bad Align, memlock refused, garbage,
		// silence): the slot is free at once, with nothing to take back.
		w.freeSlot(slot, wa)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	w.mu.Lock()
	w.procs[slot].active = true
	w.mu.Unlock()
	w.serveProcess(c, slot, wa)
}

// serveProcess serves the requests of the process in slot on c until it detaches, dies or
// breaks the protocol, and takes back what it leaves.
func (w *Owner) serveProcess(c *net.UnixConn, slot int, wa watch) {
	s := &serverConn{w: w, c: c, slot: slot, timeout: w.timeout}
	detached, err := s.serve()
	w.mu.Lock()
	w.procs[slot].active = false // its grant requests waiting end now
	w.mu.Unlock()
	s.wait()
	if !detached && err != nil && !errors.Is(err, errGone) {
		c.Close() // cut off: it broke the protocol
	}
	// A detach that says the process still maps the pool leaves what it held until it exits.
	w.leave(slot, detached && !s.kept, wa)
	if detached {
		w.mu.Lock()
		pause := w.pauseDetach
		w.pauseDetach = nil
		w.mu.Unlock()
		if pause != nil {
			pause()
		}
		// Only now: a Close that returned is no longer attached (Attached does not count it,
		// the owner's Close may follow at once).
		s.answerDetach()
	}
}

// answerDetach writes the answer to the detach of a process that has left: at once where its
// socket has room; else it waits for the process to read, the timeout at most, but not past
// the owner's Close, which cuts the wait (noSlot): the process holds nothing of the pool any
// more, nothing needs its reading, and a Close waiting on it would wait for a silent peer.
func (s *serverConn) answerDetach() {
	b := msg{op: opReply, seq: s.detachSeq, a: stOK}.encode()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	rc, err := s.c.SyscallConn()
	if err != nil {
		return
	}
	n := 0
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		n, werr = unix.Write(int(fd), b[:]) // one try: no wait
		return true
	}); err != nil {
		return // closed
	}
	switch {
	case werr == nil && n == len(b):
		return
	case werr != nil && werr != unix.EAGAIN && werr != unix.EINTR:
		return // broken
	}
	n = max(n, 0)
	w := s.w
	w.mu.Lock()
	closed := w.closed
	if !closed {
		w.noSlot[s.c] = struct{}{}
	}
	w.mu.Unlock()
	if closed {
		return
	}
	_ = s.c.SetWriteDeadline(time.Now().Add(s.timeout))
	_, _ = s.c.Write(b[n:])
	_ = s.c.SetWriteDeadline(time.Time{})
	w.mu.Lock()
	delete(w.noSlot, s.c)
	w.mu.Unlock()
}

// takeSlot takes a free slot for a process, or returns -1.
func (w *Owner) takeSlot(c *net.UnixConn, cred *unix.Ucred) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return -1
	}
	for s := 1; s < len(w.procs); s++ {
		st := &w.procs[s]
		// A serial past what a hello carries (decodeHello) is none an owner wrote: a forged
		// slot line of a pool this owner adopted (rebuild). Lent, every process that attaches
		// to the slot would refuse its hello: the slot is given up instead.
		if st.used || st.keeper != nil || st.serial >= maxPoolSize {
			continue
		}
		st.serial++
		st.used, st.active, st.conn, st.need = true, false, c, 0
		delete(w.noSlot, c) // the slot's now
		w.c.slotStore(s, sPid, uint64(cred.Pid))
		w.c.slotStore(s, sStart, startTime(int(cred.Pid)))
		w.c.slotStore(s, sFence, w.epoch)
		w.c.slotStore(s, sFlags, 0)
		w.c.slotStore(s, sSerial, st.serial)
		return s
	}
	return -1
}

// freeSlot frees the slot of a process that held nothing: it left before it was ready. No
// process of this package retains anything before, but a peer maps the pool before its ready
// and may have set retain bits of its slot: they are let go as a leave lets go a process's
// (flagRetains says whether to look), or they would keep others' buffers live.
func (w *Owner) freeSlot(slot int, wa watch) {
	wa.stop()
	w.mu.Lock()
	var retired []retirement
	var stuck []int
	if w.c.slotLoad(slot, sFlags)&flagRetains != 0 {
		retired, stuck = w.dropRetains(slot, nil)
	}
	st := &w.procs[slot]
	st.used, st.active, st.conn = false, false, nil
	if len(stuck) > 0 {
		// Bits of its stayed (a peer rewrote their words): the slot is kept, as for a process
		// gone alive (leave), until a round lets them go.
		g := newGone(slot, st.serial, watch{pidfd: -1}, true)
		g.retains, g.stuck = true, stuck
		st.keeper = g
		w.goneList = append(w.goneList, g)
		w.c.slotStore(slot, sSerial, st.serial|serialGone)
	} else {
		w.c.slotStore(slot, sSerial, 0)
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	for _, r := range retired {
		w.Process.deliver(r.e, r.gen) // not under w.mu: the owner's own frees take it
	}
}

var errGone = errors.New("ipcpool: the process closed its connection")

// serverConn is the owner's end of one attached process's connection.
type serverConn struct {
	w         *Owner
	c         *net.UnixConn
	slot      int
	timeout   time.Duration
	wmu       sync.Mutex
	grants    sync.WaitGroup
	inflight  int // grant requests being served (at most maxGrantsInFlight)
	mu        sync.Mutex
	detachSeq uint64
	kept      bool // the detach said the process still maps the pool (detachKept)
}

// maxGrantsInFlight bounds the grant requests one process may have waiting at once.
const maxGrantsInFlight = 4

// write writes m to the process. A message written in part (errPartial) cuts the process off,
// as any broken message does: it would read the rest of the stream a torn message off.
func (s *serverConn) write(m msg) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := writeMsg(s.c, m, s.timeout)
	if errors.Is(err, errPartial) {
		s.c.Close() // serve's read ends: the process leaves as one cut off
	}
	return err
}

// serve reads the process's requests until it detaches (detached), its connection ends
// (errGone) or it breaks the protocol (another error).
func (s *serverConn) serve() (detached bool, err error) {
	for {
		m, err := readMsg(s.c)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				return false, err
			}
			return false, errGone
		}
		switch m.op {
		case opGrant:
			s.mu.Lock()
			busy := s.inflight >= maxGrantsInFlight
			if !busy {
				s.inflight++
			}
			s.mu.Unlock()
			if busy {
				_ = s.write(msg{op: opReply, seq: m.seq, a: stRefused})
				continue
			}
			s.grants.Add(1)
			go s.grant(m)
		case opRelease:
			if m.a > uint64(len(s.w.table)) || m.b > uint64(len(s.w.table)) {
				return false, fmt.Errorf("%w: release of grants %d+%d", ErrProtocol, m.a, m.b)
			}
			s.w.mu.Lock()
			err := s.w.releaseRun(s.slot, int(m.a), int(m.b))
			s.w.mu.Unlock()
			if err != nil {
				return false, err
			}
		case opDetach:
			s.detachSeq, s.kept = m.seq, m.a&detachKept != 0
			return true, nil
		default:
			return false, fmt.Errorf("%w: operation %d after the handshake", ErrProtocol, m.op)
		}
	}
}

// grant serves one grant request, waiting as long as the process said it waits (at most
// the owner's timeout).
func (s *serverConn) grant(m msg) {
	defer s.grants.Done()
	d := min(time.Duration(min(m.b, uint64(s.timeout))), s.timeout)
	var reply msg
	if m.a == 0 || m.a > uint64(s.w.grantsPerRegion()) {
		reply = msg{op: opReply, seq: m.seq, a: stFull}
	} else if first, err := s.w.grantWait(s.slot, int(m.a), d); err != nil {
		reply = msg{op: opReply, seq: m.seq, a: stFull}
	} else {
		reply = msg{op: opReply, seq: m.seq, a: stOK, b: uint64(first)}
	}
	if err := s.write(reply); err != nil && reply.a == stOK {
		// Nobody will know of these grants: take them back (the process may be gone).
		s.w.mu.Lock()
		_ = s.w.releaseRun(s.slot, int(reply.b), int(m.a))
		s.w.mu.Unlock()
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
}

// wait waits for the grant requests being served: they end at the slot's leave (grantWait
// sees the slot gone) or at their deadline.
func (s *serverConn) wait() {
	s.w.mu.Lock()
	s.w.cond.Broadcast()
	s.w.mu.Unlock()
	s.grants.Wait()
}
