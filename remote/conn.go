package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// Conn is a connection to another worker: transfers between this worker's registered memory
// and the peer's descriptors (NewTransfer, Put, Get), and small messages both ways (Send,
// Recv) to exchange descriptors and say when a transfer is done. It is made by Connect or Dial,
// and on the other side by a Listener's Accept or the worker's Accept. Every method is safe for
// concurrent use.
type Conn struct {
	w      *Worker
	id     uint64 // this side's id, which the peer's messages name
	peerID uint64 // the peer's
	peer   uint64 // the peer's worker
	dialed uint64 // the worker Dial dialed (its hello may cross c's: crossed), or zero
	ep     ucx.Ep
	remote string // what it was connected to (with its id where it dialed), for errors

	// Under w.mu:
	state      uint8
	err        error // why it failed or closed
	inflight   int   // operations and messages in flight on ep
	msgSlots   int   // the worker's slots its messages hold: in flight (at most connMessages, takeSlot)
	ansSlots   int   // the worker's slots its answers to the peer hold: in flight (at most w.connAnswers)
	copying    int   // transfers copying into or out of the peer's segments (Transfer.copy)
	gets       int   // gets by message in flight (getWindow)
	dataOps    int   // puts and gets by message in flight, parts included (dataWindow)
	rkeys      map[uint32]*rkeyEntry
	mds        *[64]string  // the transport of each remote memory domain of ep's lanes, once known (laneMDs)
	retired    []*rkeyEntry // forgotten by the peer while transfers used their keys: destroyed after the last (forget)
	forgets    []uint32     // this worker's regions deregistered, to tell the peer of (sendForgets)
	forgetting bool         // in w.forgetting
	mode       Mode         // how its transfers go: decided at the first (messages.go)
	copies     uint8        // its messages go by copy (copiesUnknown, ...: sendsByCopy)
	msgs       []queuedMsg
	msgBytes   *int     // msgs' bytes, msgOverhead each, counted in w.queued too (msgShare)
	putsIn     uint64   // the peer's puts by message received, to be placed once their buffer is held (targetHeld)
	putsPlaced uint64   // of those, the ones placed, refused or dropped since: in order (holdAnswers)
	acks       []uint64 // puts of the peer's placed this round, to acknowledge (messages.go)
	acking     bool     // in w.acking
	answering  int      // answers to the peer waiting for a slot (answers) or a hold (w.unheld): maxQueuedAnswers
	reaped     bool
	watcher    *os.File // the peer's pidfd, without UCX's failure handling (watch.go)
	pid        uint32   // the peer's process, while watched
	abandoned  bool     // ended without UCX's word: its endpoint is never closed (watch.go)
	exited     bool     // its peer process exited: queued in w.exited to be abandoned (watch.go)
	crossed    bool     // opened by the peer's Dial's hello (crossed): its ack to c's hello may come

	// Answers to the peer waiting for a slot, in order, from answerHead on (postAnswers);
	// answerWait says c is in w.answers.
	answers    []pendingAnswer
	answerHead int
	answerWait bool

	gone     atomic.Bool   // state is connFailed: read without the lock by Transfer's checks
	ready    chan struct{} // closed once the handshake ends (state open or failed)
	dead     chan struct{} // closed when it fails or closes
	recv     chan struct{} // a message came (buffered, 1)
	reapedCh chan struct{} // closed once its endpoint is closed and its keys destroyed
}

const (
	connConnecting = iota
	connOpen
	connFailed // failed, closed, or closed by the peer: err says which
)

// rkeyEntry is a peer's region as the connection knows it: from the first descriptor of it.
type rkeyEntry struct {
	rkey       ucx.Rkey
	base, size uint64
	memType    uint8
	packed     string
	direct     int8    // reached by copy (direct.go): 1 yes, -1 no, 0 not yet known
	local      uintptr // where base is mapped in this process, when direct

	// users counts the transfers that use its key, from Start to their end (Transfer.use):
	// UCX's puts and gets in flight name it, a copy reads and writes the segment it keeps
	// attached. retired says the peer forgot the region meanwhile: out of rkeys, in retired,
	// its key destroyed once users is 0.
	users   int
	retired bool
}

// queuedMsg is a message of the peer's waiting for Recv, with the number of the peer's puts by
// message received before it (putsIn then): Recv returns it once they are placed (putsPlaced),
// so that a message sent after a put never shows before the put's bytes are in place.
type queuedMsg struct {
	b     []byte
	after uint64
}

// msgOverhead is what a message queued for Recv costs beyond its bytes (its slice in c.msgs,
// the header of the copy it lies in), counted against queuedMessages: a flood of empty messages
// is bounded too.
const msgOverhead = 64

// maxRegionsPerConn bounds the regions of the peer a connection knows at once (unpacking their
// keys): a peer's regions are 64 per pool at most, and a flood of forged ones must not grow
// UCX's memory without bound. It bounds the regions live at the peer, not every region the
// connection ever saw: the peer tells it of each region it deregisters (msgForget), and the
// connection forgets it.
const maxRegionsPerConn = 4096

// Messages of the protocol between two workers' connections, little-endian: a magic, a type,
// the protocol's version, two zero bytes and the id of the connection it is for (zero in a
// hello), then the body. A hello of another version is answered with msgVersion, which every
// version from 1 on reads the same way, and the dialer fails with ErrProtocol naming both
// versions; any other message of another version is dropped.
const (
	msgMagic   = "pmrm"
	msgHeader  = 16
	msgHello   = 1 // body: the sender's connection id, worker id, pid, host id, address length, and, from Dial, its address
	msgAck     = 2 // body: the sender's connection id, worker id, pid, host id
	msgData    = 3 // body: the user's message
	msgBye     = 4 // the sender closed the connection
	msgVersion = 5 // to a hello of another version, for the connection it named: no body; the header says the version
	msgForget  = 6 // body: 1 to forgetMax region ids of the sender's (4 bytes each, not zero), deregistered: forget them (forget.go)

	// protoVersion is the version of the protocol: of these messages and of the data
	// messages (messages.go). Version 1 acknowledges puts in batches (dataDones); the
	// version before it, 0, had one answer a put. Version 2 keeps dataWindow puts and gets by
	// message in flight on a connection at most, and its target fails a connection whose peer
	// has more answers waiting (maxQueuedAnswers): a peer of version 1, which kept up to its
	// MaxInFlight in flight, is refused at the handshake rather than failed mid-transfer.
	// Within version 2, never released before: a put by message goes in parts of putPart
	// bytes at most, and a target fails a connection whose peer sends a longer data message.
	protoVersion = 2
)

// helloVersion is the version a hello says: protoVersion, but in tests of a peer of another.
var helloVersion byte = protoVersion

func newConn(w *Worker, ep ucx.Ep, remote string) *Conn {
	c := &Conn{w: w, id: randomID(), ep: ep, remote: remote, rkeys: map[uint32]*rkeyEntry{},
		ready: make(chan struct{}), dead: make(chan struct{}), recv: make(chan struct{}, 1), reapedCh: make(chan struct{}),
		msgBytes: new(int)}
	runtime.AddCleanup(c, w.msgShare, c.msgBytes)
	w.conns[c.id] = c
	w.byEp[ep] = c
	return c
}

// msgShare gives back to the worker's bound (queuedWorker) the bytes of the messages a
// connection queued that nobody received, once the Conn is gone (a failed one, reaped and
// dropped by its user with messages in it): runtime.AddCleanup's, with its msgBytes, which
// the Conn keeps apart so that the cleanup does not keep the Conn.
func (w *Worker) msgShare(n *int) {
	w.mu.Lock()
	w.queued -= *n
	*n = 0
	w.mu.Unlock()
}

// helloLen and ackLen are the fixed parts of a hello's and an acknowledgement's body.
const (
	ackLen   = 28
	helloLen = ackLen + 4
)

// greeting is the body of a hello or of an acknowledgement: the sender's connection id, worker
// id, pid and host id (hostID), and a hello's worker address (Dial's, or none).
type greeting struct {
	conn, worker uint64
	pid          uint32
	host         uint64
	addr         []byte
}

// appendGreeting appends g as a hello's body (with its address's length and the address) or as
// an acknowledgement's.
func appendGreeting(b []byte, g greeting, hello bool) []byte {
	b = binary.LittleEndian.AppendUint64(b, g.conn)
	b = binary.LittleEndian.AppendUint64(b, g.worker)
	b = binary.LittleEndian.AppendUint32(b, g.pid)
	b = binary.LittleEndian.AppendUint64(b, g.host)
	if hello {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g.addr)))
		b = append(b, g.addr...)
	}
	return b
}

// parseGreeting reads the body of a peer's hello (hello) or acknowledgement: ok is false unless
// it is exactly what appendGreeting writes, with connection and worker ids that are not zero.
func parseGreeting(body []byte, hello bool) (g greeting, ok bool) {
	if len(body) < ackLen || !hello && len(body) != ackLen || hello && len(body) < helloLen {
		return greeting{}, false
	}
	g = greeting{conn: binary.LittleEndian.Uint64(body), worker: binary.LittleEndian.Uint64(body[8:]),
		pid: binary.LittleEndian.Uint32(body[16:]), host: binary.LittleEndian.Uint64(body[20:])}
	if hello {
		if uint64(binary.LittleEndian.Uint32(body[ackLen:])) != uint64(len(body)-helloLen) {
			return greeting{}, false
		}
		g.addr = body[helloLen:]
	}
	return g, g.conn != 0 && g.worker != 0
}

// parseMessage reads a message of the protocol: its type, its version, the connection it is for
// and its body; ok is false for bytes that are not the protocol's (short, another magic, the
// reserved bytes set).
func parseMessage(m []byte) (typ, version byte, dst uint64, body []byte, ok bool) {
	if len(m) < msgHeader || string(m[:4]) != msgMagic || m[6] != 0 || m[7] != 0 {
		return 0, 0, 0, nil, false
	}
	return m[4], m[5], binary.LittleEndian.Uint64(m[8:]), m[msgHeader:], true
}

// header returns a message's header of type typ for the peer's connection dst.
func header(typ byte, dst uint64, body int) []byte {
	b := make([]byte, msgHeader, msgHeader+body)
	copy(b, msgMagic)
	b[4], b[5] = typ, protoVersion
	binary.LittleEndian.PutUint64(b[8:], dst)
	return b
}

// sendLocked sends message m on c's endpoint; with done, the result is sent on done (when the
// send completes later). Under mu.
func (w *Worker) sendLocked(c *Conn, ep ucx.Ep, m []byte, reply bool, done chan error) error {
	i, ok := w.takeSlot(slotMsg, c)
	if !ok {
		if c != nil && c.msgSlots >= connMessages {
			return fmt.Errorf("%w: %d messages to %s in flight (the most one connection may have)", ErrBusy, connMessages, c.remote)
		}
		return fmt.Errorf("%w: no slot free for a message (%d messages and closes in flight, %d connections without one)", ErrBusy, w.control, len(w.conns)-w.senders)
	}
	w.slots[i].done = done
	inflight, err := w.uw.SendMessage(ep, m, reply, c == nil || w.sendsByCopy(c), i) // no connection: by copy, the safe way
	if !inflight {
		w.freeSlot(i)
		if err != nil {
			return w.statusErr(c, int32(statusOf(err)))
		}
		if done != nil {
			done <- nil
		}
		return nil
	}
	if c != nil {
		c.inflight++
	}
	w.signal()
	return nil
}

// statusOf returns err's UCX status, or -1 (UCS_ERR_NO_MESSAGE) for another error.
func statusOf(err error) ucx.Status {
	if s, ok := err.(ucx.Status); ok {
		return s
	}
	return -1
}

// message handles a message of the protocol, from the endpoint replyEp when the sender asked
// for a reply (a hello). Under mu.
func (w *Worker) message(replyEp ucx.Ep, m []byte) {
	typ, version, dst, body, ok := parseMessage(m)
	if !ok {
		return // not this protocol's: dropped
	}
	switch {
	case typ == msgHello && version != protoVersion:
		w.refuseVersion(replyEp, body)
		return
	case typ == msgVersion:
		if c := w.conns[dst]; c != nil && c.state == connConnecting && len(body) == 0 {
			w.failConn(c, fmt.Errorf("%w: %s speaks version %d of the protocol, this worker %d", ErrProtocol, c.remote, version, helloVersion))
		}
		return
	case version != protoVersion:
		return // another version's: dropped
	case typ == msgHello:
		w.hello(replyEp, body)
		return
	}
	c := w.conns[dst]
	if c == nil {
		return // for a connection gone, or a guess: dropped
	}
	switch typ {
	case msgAck:
		g, ok := parseGreeting(body, false)
		if c.crossed && ok && g.conn == c.peerID && g.worker == c.peer {
			c.crossed = false // the peer's answer to c's hello, which crossed its own: c is open
			return
		}
		if c.state != connConnecting || !ok {
			w.failConn(c, fmt.Errorf("%w: unexpected acknowledgement from %s", ErrProtocol, c.remote))
			return
		}
		c.peerID, c.peer, c.state = g.conn, g.worker, connOpen
		close(c.ready)
		w.watch(c, g.pid, g.host)
	case msgData:
		if c.state != connOpen {
			return
		}
		if len(body) > w.opts.MaxMessage {
			w.failConn(c, w.tooLarge(c, len(body)))
			return
		}
		size := msgOverhead + len(body)
		if len(c.msgs) > 0 && *c.msgBytes+size > queuedMessages { // one always fits
			w.failConn(c, fmt.Errorf("%w: %s sent more than %d bytes of messages nobody received", ErrProtocol, c.remote, queuedMessages))
			return
		}
		if w.queued+size > queuedWorker && !w.makeRoom(c, size) {
			return
		}
		c.msgs = append(c.msgs, queuedMsg{b: body, after: c.putsIn})
		*c.msgBytes += size
		w.queued += size
		select {
		case c.recv <- struct{}{}:
		default:
		}
	case msgBye:
		w.failConn(c, fmt.Errorf("%w: the peer closed the connection", ErrClosed))
	case msgForget:
		w.forgetMessage(c, body)
	}
}

// oversize takes a message UCX's callback dropped, uncopied, as beyond this worker's limits
// (ucx.Worker.LimitMessages), or, flood, because more came in one progress round than the
// worker queues (ucx.Event.Dropped): n bytes, of which peek is the first (the protocol's
// header). The connection it names, still open or connecting, fails with ErrProtocol: its peer
// sent more than this worker said it takes, and a message dropped is never seen by the Recv or
// the handshake that waits for it. Under mu.
func (w *Worker) oversize(peek []byte, n int, flood bool) {
	typ, version, dst, _, ok := parseMessage(peek)
	c := w.conns[dst]
	if !ok || version != protoVersion || c == nil || c.state == connFailed {
		return // not this protocol's, or for no connection (a hello): dropped
	}
	if flood {
		w.failConn(c, fmt.Errorf("%w: %s sent more messages at once than this worker queues: one of %d bytes was dropped", ErrProtocol, c.remote, n))
		return
	}
	if typ == msgData {
		w.failConn(c, w.tooLarge(c, n-msgHeader))
		return
	}
	w.failConn(c, fmt.Errorf("%w: %s sent a message of type %d of %d bytes, beyond the %d this worker takes", ErrProtocol, c.remote, typ, n, msgHeader+maxControl))
}

// tooLarge is the error of a connection whose peer sent a message of n bytes, beyond
// MaxMessage.
func (w *Worker) tooLarge(c *Conn, n int) error {
	return fmt.Errorf("%w: %s sent a message of %d bytes, beyond this worker's MaxMessage (%d)", ErrProtocol, c.remote, n, w.opts.MaxMessage)
}

// hello answers a peer's hello: the connection it opens is accepted, on the endpoint its
// listener accepted (replyEp), or on a new one to the address it sent (Dial, whose hello comes
// on an endpoint UCX made for the dialer). A hello with no endpoint to answer on (every honest
// one asks for it), or on the endpoint of a connection (its peer said hello already), is
// dropped: a client of a listener, which need not know this worker's address, makes it connect
// to none. One exception: a hello on the endpoint of this worker's Dial still waiting for its
// answer, from the worker it dialed, is that worker's Dial crossing this one (crossed). A
// Dial's hello is dropped, no endpoint made, while maxUnclosed endpoint closes wait for a control
// slot: a flood of them, each failing with its acknowledgement unsent, grew the closes waiting
// (and their endpoints and connections) without bound. Under mu.
func (w *Worker) hello(replyEp ucx.Ep, body []byte) {
	g, ok := parseGreeting(body, true)
	if !ok || w.closing || replyEp == 0 {
		return
	}
	if c := w.byEp[replyEp]; c != nil {
		w.crossed(c, g)
		return
	}
	var c *Conn
	var into chan *Conn
	if pe := w.pending[replyEp]; pe.l != nil {
		delete(w.pending, replyEp)
		c = newConn(w, replyEp, acceptedName(pe.l, pe.client))
		into = pe.l.accepted
	} else if len(g.addr) > 0 {
		if len(w.unclosed) >= w.unclosedBound { // a flood of dials: no endpoint for it (maxUnclosed)
			w.logf("remote: refused the dial of %s: %d endpoint closes wait for a slot", dialerName(g), len(w.unclosed))
			return
		}
		ep, err := w.uw.ConnectAddress(g.addr)
		if err != nil {
			w.logf("remote: refused the dial of %s: %v", dialerName(g), err)
			return
		}
		c = newConn(w, ep, dialerName(g))
		into = w.inbound
	} else {
		return
	}
	c.peerID, c.peer, c.state = g.conn, g.worker, connOpen
	close(c.ready)
	w.watch(c, g.pid, g.host)
	if err := w.acknowledge(c); err != nil {
		w.failConn(c, err)
		return
	}
	select {
	case into <- c:
	default:
		w.failConn(c, fmt.Errorf("%w: too many connections waiting for Accept", ErrBusy))
	}
}

// crossed takes hello g, which came on the endpoint of connection c, for the peer's answer to
// c's own hello where c is a Dial still waiting for it and g comes from the worker it dialed.
// Two workers that Dial each other at once each make an endpoint to the other, which UCX
// matches to the other's (by worker and count), so each hello comes on the endpoint of the
// other side's Dial: dropped there, neither was answered and both Dials timed out
// (TestCrossedDials). So each side opens its Dial's connection with the other's hello, and
// acknowledges it as an answer; the two Dials return the two ends of one connection, as TCP's
// simultaneous open does, and no Accept returns it. The acknowledgement of c's own hello that
// may follow is taken once (msgAck). Any other hello on a connection's endpoint is dropped: a
// peer makes no connection this way, and opens only the one that waits for its answer. So is
// the hello of a Dial of this worker's own address, which UCX hands back on that Dial's own
// endpoint: taken, it made the connection its own peer (TestSelfDialIsNotCrossed). Under mu.
func (w *Worker) crossed(c *Conn, g greeting) {
	if c.state != connConnecting || c.dialed == 0 || g.worker != c.dialed || g.worker == w.id {
		return
	}
	c.peerID, c.peer, c.state, c.crossed = g.conn, g.worker, connOpen, true
	close(c.ready)
	w.watch(c, g.pid, g.host)
	if err := w.acknowledge(c); err != nil {
		w.failConn(c, err)
	}
}

// acknowledge answers the hello of c's peer (c.peerID) with c's own ids. Under mu.
func (w *Worker) acknowledge(c *Conn) error {
	g := greeting{conn: c.id, worker: w.id, pid: uint32(os.Getpid()), host: hostID()}
	return w.sendLocked(c, c.ep, appendGreeting(header(msgAck, c.peerID, ackLen), g, false), false, nil)
}

// refuseVersion answers a hello of another version of the protocol, on the endpoint its
// listener accepted, with msgVersion for the connection it named. A hello to Dial's address
// has no endpoint to answer on: the dialer's handshake times out. Under mu.
func (w *Worker) refuseVersion(replyEp ucx.Ep, body []byte) {
	l := w.pending[replyEp].l
	if l == nil || replyEp == 0 || len(body) < 8 {
		return
	}
	delete(w.pending, replyEp)
	if peerConn := binary.LittleEndian.Uint64(body); peerConn != 0 {
		_ = w.sendLocked(nil, replyEp, header(msgVersion, peerConn, 0), false, nil)
	}
	w.closeEp(replyEp, nil, false)
}

// failConn ends c with err: its waiters wake, its endpoint is closed at once (which ends its
// operations in flight with errors), and its keys are destroyed once the close completes.
// Under mu.
func (w *Worker) failConn(c *Conn, err error) {
	if c.state == connFailed {
		return
	}
	if c.state == connConnecting {
		close(c.ready)
	}
	c.state, c.err = connFailed, err
	c.gone.Store(true)
	close(c.dead)
	if w.log != nil {
		if s := err.Error(); strings.Contains(s, c.remote) {
			w.logf("remote: connection ended: %s", s) // the error names its remote
		} else {
			w.logf("remote: connection to %s ended: %s", c.remote, s)
		}
	}
	// Its transfers not yet posted end now; those in flight end with their operations.
	kept := w.queue[:0]
	for _, t := range w.queue {
		if t.c == c {
			t.fail(err)
			if t.completed() {
				w.finished = append(w.finished, t)
			}
			continue
		}
		kept = append(kept, t)
	}
	clear(w.queue[len(kept):])
	w.queue = kept
	if c.answering > 0 { // its peer's answers waiting for a slot or a hold: none will be sent
		w.dropAnswers(c)
		unheld := w.unheld[:0]
		for _, a := range w.unheld {
			if a.c != c {
				unheld = append(unheld, a)
			} else if a.put {
				w.uw.ReleaseData(a.key)
				c.putsPlaced++ // dropped: the messages after it are the peer's last
			}
		}
		clear(w.unheld[len(unheld):])
		w.answering -= c.answering // those left in w.unheld (dropAnswers took the others')
		w.unheld, c.answering = unheld, 0
		if len(c.msgs) > 0 { // a message after a put dropped may be Recv's now: wake it
			select {
			case c.recv <- struct{}{}:
			default:
			}
		}
	}
	if c.abandoned { // the peer is gone and UCX will not say so: end everything now
		w.abandonSlots(c)
		w.reap(c)
		return
	}
	if w.opts.SharedMemory {
		// Its endpoint's close is not forced (UCX cancels nothing without its failure
		// handling): what UCX holds stays there for as long as the peer stalls. Its
		// operations end now, as an abandoned connection's, those UCX holds left to zombie
		// slots that keep their buffers held until UCX lets go of them.
		w.abandonSlots(c)
	} else if c.dataOps > 0 {
		// Its operations waiting for the peer's answer end now: none will come. Only puts and
		// gets by message wait for one (counted in dataOps): a connection without any fails
		// without a look at every slot, so a peer that opens connections and fails them costs
		// little each.
		w.endAwaited(c)
	}
	w.closeEp(c.ep, c, !w.opts.SharedMemory)
}

// endAwaited ends c's operations waiting for the peer's answer (failConn). Under mu.
func (w *Worker) endAwaited(c *Conn) {
	w.scanned += len(w.slots)
	for i := range w.slots {
		if s := &w.slots[i]; s.kind == slotOp && s.c == c && s.remote {
			s.remote = false
			w.uw.DisarmReply(uint32(i))
			if s.status == 0 {
				s.status = stEnded // the error is c.err (statusErr)
			}
			if !s.sending {
				w.endOp(uint32(i))
			}
		}
	}
}

// reap destroys c's remote keys once its endpoint is closed (or once the copies that use
// them end), and forgets it. Under mu.
func (w *Worker) reap(c *Conn) {
	if c == nil || c.reaped {
		return
	}
	c.reaped = true
	if c.watcher != nil {
		_ = c.watcher.Close()
	}
	if c.copying == 0 {
		w.destroyKeys(c)
	} // else once the copies that use them end (Transfer.copy)
	delete(w.conns, c.id)
	if *c.msgBytes > 0 { // still counted in the worker's bound: a candidate of makeRoom's
		w.keepEnded(c)
	}
	if w.byEp[c.ep] == c {
		delete(w.byEp, c.ep)
	}
	close(c.reapedCh)
}

// destroyKeys destroys c's remote keys, which detaches the peer's segments mapped here
// (direct.go). Under mu.
func (w *Worker) destroyKeys(c *Conn) {
	for id, e := range c.rkeys {
		w.destroyRkey(c, e)
		delete(c.rkeys, id)
	}
	for i, e := range c.retired {
		w.destroyRkey(c, e)
		c.retired[i] = nil
	}
	c.retired = c.retired[:0]
}

// destroyRkey destroys e's key, once. Under mu.
func (w *Worker) destroyRkey(c *Conn, e *rkeyEntry) {
	if e.rkey != 0 && !c.abandoned { // an abandoned one's may serve zombies: they go with the worker
		w.uw.DestroyRkey(e.rkey)
		e.rkey = 0
	}
}

// Peer returns the id of the worker at the other end (its Worker.ID).
func (c *Conn) Peer() uint64 { return c.peer }

// Err returns why the connection ended, or nil while it is open.
func (c *Conn) Err() error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.err
}

// Send sends msg to the peer, which receives it whole with Recv, in order. It returns once
// UCX has sent it, when the connection ends (its error: a peer that stalls holds up no Send
// past its connection's end), or when ctx ends; msg may then be reused, and a message whose
// ctx or connection ended stays in flight, a copy, until UCX has sent it or let go of it. A
// message is at most Options.MaxMessage bytes (ErrTooLarge); after the connection failed or
// closed, the error says why. With 256 of this worker's messages to the peer in flight (a peer
// that reads nothing keeps them there), or no slot free for one among the 1,024 the worker's
// connections share, it returns ErrBusy: a peer that stops reading holds up its own
// connection's messages, and no other's.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	w := c.w
	if len(msg) > w.opts.MaxMessage {
		return fmt.Errorf("%w: %d bytes (MaxMessage %d)", ErrTooLarge, len(msg), w.opts.MaxMessage)
	}
	m := append(header(msgData, c.peerID, len(msg)), msg...)
	done := make(chan error, 1)
	w.mu.Lock()
	if c.state != connOpen {
		err := c.stateErr()
		w.mu.Unlock()
		return err
	}
	err := w.sendLocked(c, c.ep, m, false, done)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-c.dead: // ended: a message still in flight goes with it, or goes unread
		select {
		case err := <-done:
			return err
		default:
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stateErr is the error of a call on c after it ended. Under mu.
func (c *Conn) stateErr() error {
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("%w: connection not open", ErrClosed)
}

// Recv returns the next message from the peer, waiting for one until ctx ends. Messages that
// came before the connection ended are still returned; then the error says why it ended. A
// message the peer sent after starting a put by message or by copy on this connection (Start,
// without waiting for it) is returned once the put's bytes are in place; a put of UCX's own
// (ModeRMA) has no such order with messages: the peer waits for it (Wait) before it sends. A
// message beyond this worker's Options.MaxMessage is never queued: the connection fails with
// ErrProtocol. So does one beyond the messages nobody received that the worker queues on a
// connection, 64 MiB. Beyond the 256 MiB it queues on all of them together (a peer that opens
// many connections holds no more), the connection holding the most, the message's own counted
// with it, loses the messages it queued: they are not returned, and Recv returns ErrProtocol
// saying they were dropped. It is any connection holding messages: an open one fails; one that
// ended (closed by the peer, or failed) with messages left for Recv is no exception, or a peer
// could fill connections and close them to make the next honest message fail. So a peer that
// sent, then closed, may lose its last messages if they are not received, but only when the
// worker's 256 MiB are reached, which a user that receives its messages never comes near. A
// message received, or a Conn dropped, gives its bytes back.
func (c *Conn) Recv(ctx context.Context) ([]byte, error) {
	w := c.w
	for {
		w.mu.Lock()
		if len(c.msgs) > 0 && c.msgs[0].after <= c.putsPlaced {
			m := c.msgs[0].b
			c.msgs[0] = queuedMsg{}
			c.msgs = c.msgs[1:]
			*c.msgBytes -= msgOverhead + len(m)
			w.queued -= msgOverhead + len(m)
			w.mu.Unlock()
			return m, nil
		}
		placing := len(c.msgs) > 0 // a message waits for a put before it to be placed
		if c.state == connFailed && !placing {
			err := c.err
			w.mu.Unlock()
			return nil, err
		}
		dead := c.dead
		if placing {
			dead = nil // closed once failed: the put's end wakes Recv (c.recv)
		}
		hook := w.recvHook
		w.mu.Unlock()
		if placing && hook != nil {
			hook()
		}
		select {
		case <-c.recv:
		case <-dead:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close closes the connection: it waits for the transfers in flight on it (10 s at most),
// tells the peer, and closes the endpoint. The peer's Recv then reports ErrClosed.
func (c *Conn) Close() error {
	w := c.w
	w.mu.Lock()
	if c.state != connOpen {
		err := c.stateErr()
		w.mu.Unlock()
		if c.err != nil {
			return nil // failed or closed by the peer: nothing more to do than was done
		}
		return err
	}
	w.mu.Unlock()
	deadline := time.Now().Add(closeWait)
	for {
		w.mu.Lock()
		busy := c.inflight > 0 || c.copying > 0 || c.queued()
		w.mu.Unlock()
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	w.mu.Lock()
	if c.state == connOpen {
		_ = w.sendLocked(c, c.ep, header(msgBye, c.peerID, 0), false, nil)
		w.failConn(c, fmt.Errorf("%w: connection closed", ErrClosed))
	}
	w.mu.Unlock()
	select {
	case <-c.reapedCh:
	case <-time.After(closeWait):
		return fmt.Errorf("%w: the endpoint to %s did not close within %v", ErrBusy, c.remote, closeWait)
	}
	return nil
}

// queued reports whether a transfer of c waits for slots. Under mu.
func (c *Conn) queued() bool {
	for _, t := range c.w.queue {
		if t.c == c {
			return true
		}
	}
	return false
}

// region checks descriptor d against what the connection learned of its region from the
// first descriptor of it, and returns the region: another range, memory type or key is a
// forged or stale descriptor, refused. Under mu.
func (c *Conn) region(d *Descriptor) (*rkeyEntry, error) {
	e := c.rkeys[d.region]
	if e == nil {
		if len(c.rkeys) >= maxRegionsPerConn {
			return nil, fmt.Errorf("%w: more than %d regions of worker %016x", ErrDescriptor, maxRegionsPerConn, d.worker)
		}
		e = &rkeyEntry{base: d.base, size: d.size, memType: d.memType, packed: d.rkey}
		c.rkeys[d.region] = e
		return e, nil
	}
	if e.base != d.base || e.size != d.size || e.memType != d.memType || e.packed != d.rkey {
		return nil, fmt.Errorf("%w: region %d of worker %016x is [%#x, +%d) with another key, not [%#x, +%d): a forged or stale descriptor", ErrDescriptor, d.region, d.worker, e.base, e.size, d.base, d.size)
	}
	return e, nil
}

// rkey returns the peer's region that descriptor d names (checked by region) and its key,
// unpacked once per region. Under mu.
func (c *Conn) rkey(d *Descriptor) (*rkeyEntry, ucx.Rkey, error) {
	e, err := c.region(d)
	if err != nil {
		return nil, 0, err
	}
	rk, err := c.unpack(e)
	return e, rk, err
}

// unpack returns e's key, unpacked once (destroyed with the connection's keys, reap): for
// UCX's puts and gets (rkey), or to map the peer's region here (direct.go). UCX reads a
// packed key with no length, so it is given a copy followed by zeros, which no key it packed
// reads past, of the memory domains of the endpoint's lanes only, their shared-memory keys
// checked first (shmKey). Under mu.
func (c *Conn) unpack(e *rkeyEntry) (ucx.Rkey, error) {
	if e.rkey == 0 {
		padded, attached, err := c.shmKey(e.packed) // checked first: UCX 1.13 dies of a key it cannot unpack (rkeyshm.go)
		if err != nil {
			return 0, err
		}
		r, err := c.w.uw.UnpackRkey(c.ep, padded)
		detach(attached)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrDescriptor, err)
		}
		e.rkey = r
	}
	return e.rkey, nil
}

// rkeyPad is the zeros after a packed key given to UCX: its parser reads, per memory domain a
// key's bit map names, a length byte and that many bytes, 64 domains at most.
const rkeyPad = 64 * 257

func (w *Worker) logf(format string, args ...any) {
	if w.log != nil {
		w.log.Info(fmt.Sprintf(format, args...))
	}
}
