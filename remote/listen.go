package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// Two ways to connect. A Listener takes connections on a socket address (ucp_listener: UCX's
// connection manager over TCP, whatever transports the data then takes), and Connect makes one
// to it. Or the worker's address (Address), carried to the peer by whatever control plane the
// program has, is Dialed, and the worker that owns the address takes the connection with
// Accept. Either way both sides then know each other's worker id, which every descriptor used
// on the connection must carry.

// maxPending bounds the endpoints accepted by listeners and waiting for their hello.
const maxPending = 1024

// helloTimeout is how long an endpoint a listener accepted waits for its client's hello: one
// that says nothing is closed then, so that silent clients hold none of the maxPending places
// for long (a variable: tests shorten it).
var helloTimeout = 10 * time.Second

// Listener takes connections on a socket address.
type Listener struct {
	w        *Worker
	tag      uint64
	l        ucx.Listener
	addr     string
	accepted chan *Conn
	closed   chan struct{}
	done     bool // under w.mu
}

// Listen listens on address, "host:port" (port 0: any free port, which Addr then gives).
func (w *Worker) Listen(address string) (*Listener, error) {
	sa, ta, err := sockaddr(address)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return nil, ErrClosed
	}
	l := &Listener{w: w, tag: randomID(), accepted: make(chan *Conn, 64), closed: make(chan struct{})}
	if l.l, err = w.uw.Listen(sa, l.tag); err != nil {
		return nil, wrap(ErrPeer, err)
	}
	port, err := w.uw.ListenerPort(l.l)
	if err != nil {
		w.uw.DestroyListener(l.l)
		return nil, wrap(ErrUCX, err)
	}
	l.addr = net.JoinHostPort(ta.IP.String(), strconv.Itoa(port))
	w.lis[l.tag] = l
	w.signal()
	return l, nil
}

// Addr returns the address the listener listens on, its port resolved.
func (l *Listener) Addr() string { return l.addr }

// Accept returns the next connection made to the listener, waiting until ctx ends.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.accepted:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("%w: listener %s", ErrClosed, l.addr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the listener. Connections Accept returned stay open; those it took that no
// Accept returned are closed (nobody else could close them).
func (l *Listener) Close() error {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	if l.done {
		return ErrClosed
	}
	l.w.closeListener(l)
	return nil
}

// closeListener destroys l. Under mu.
func (w *Worker) closeListener(l *Listener) {
	if l.done {
		return
	}
	l.done = true
	w.uw.DestroyListener(l.l)
	delete(w.lis, l.tag)
	for ep, pe := range w.pending {
		if pe.l == l {
			delete(w.pending, ep)
			w.closeEp(ep, nil, !w.opts.SharedMemory)
		}
	}
	w.closeUnaccepted(l.accepted, "listener "+l.addr)
	close(l.closed)
}

// closeUnaccepted takes the connections queued in accepted (of a listener, or Dial's) that no
// Accept returned, and closes them: no Accept returns them now. In the worker's Close, which
// ends every connection its own way, it only takes them. An Accept racing it takes some of
// them first. Under mu.
func (w *Worker) closeUnaccepted(accepted chan *Conn, by string) {
	for {
		var c *Conn
		select {
		case c = <-accepted:
		default:
			return
		}
		if w.closing {
			continue
		}
		if c.state == connOpen {
			_ = w.sendLocked(c, c.ep, header(msgBye, c.peerID, 0), false, nil)
		}
		w.failConn(c, fmt.Errorf("%w: %s closed before the connection was accepted", ErrClosed, by))
	}
}

// connRequest accepts a connection request of the listener tagged tag: the endpoint waits for
// the client's hello. The client's address, for the connection's name, is asked once here. It
// is rejected while maxPending endpoints wait for a hello, or maxUnclosed endpoint closes wait
// for a control slot. Under mu.
func (w *Worker) connRequest(r ucx.ConnRequest, tag uint64) {
	l := w.lis[tag]
	if l == nil || w.closing || len(w.pending) >= maxPending || len(w.unclosed) >= w.unclosedBound {
		if l != nil {
			_ = w.uw.Reject(l.l, r)
		}
		return
	}
	client := clientAddr(w.uw.ConnRequestAddr(r)) // before Accept, which consumes r
	ep, err := w.uw.Accept(r)
	if err != nil {
		w.logf("remote: could not accept the connection of %s: %v", acceptedName(l, client), err)
		return
	}
	w.pending[ep] = pendingEp{l: l, since: time.Now(), client: client}
}

// clientAddr formats a listener's client's socket address sa, ucx.Worker.ConnRequestAddr's
// (err its error): "" where UCX could not say it. The bytes describe the peer, so
// ucx.SockaddrString reads them.
func clientAddr(sa []byte, err error) string {
	if err != nil {
		return ""
	}
	return ucx.SockaddrString(sa)
}

// acceptedName names a connection listener l accepted, for its errors and log lines, by its
// client's address (clientAddr): "client 10.0.0.5:41234 of listener 0.0.0.0:13337", or,
// client "", "listener 0.0.0.0:13337".
func acceptedName(l *Listener, client string) string {
	if client == "" {
		return "listener " + l.addr
	}
	return "client " + client + " of listener " + l.addr
}

// pendingEp is an endpoint a listener accepted, waiting for its client's hello since when;
// client is the client's address (clientAddr).
type pendingEp struct {
	l      *Listener
	since  time.Time
	client string
}

// expirePending closes the endpoints accepted by a listener whose client has sent no hello
// within helloTimeout. Under mu, by the progress goroutine.
func (w *Worker) expirePending(now time.Time) {
	if len(w.pending) == 0 || now.Sub(w.expired) < min(helloTimeout/4, idleTick) {
		return
	}
	w.expired = now
	for ep, pe := range w.pending {
		if now.Sub(pe.since) >= helloTimeout {
			delete(w.pending, ep)
			who := "a client"
			if pe.client != "" {
				who = "client " + pe.client
			}
			w.logf("remote: %s of listener %s sent no hello within %v: its endpoint is closed",
				who, pe.l.addr, helloTimeout)
			w.closeEp(ep, nil, !w.opts.SharedMemory)
		}
	}
}

// Connect connects to the listener at address ("host:port"), waiting for the handshake until
// ctx ends.
func (w *Worker) Connect(ctx context.Context, address string) (*Conn, error) {
	sa, _, err := sockaddr(address)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	ep, err := w.uw.ConnectSockaddr(sa)
	if err != nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("%w: connect to %s: %w", ErrPeer, address, err)
	}
	c := newConn(w, ep, "")
	c.remote = fmt.Sprintf("%s, connection %08x", address, connTag(c.id)) // two to one address differ
	return w.handshake(ctx, c, nil, 0)
}

// Address returns the worker's address, for a peer's Dial: a few hundred bytes naming the
// worker and how to reach it, to send over the program's own control plane.
func (w *Worker) Address() ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return nil, ErrClosed
	}
	a, err := w.uw.Address()
	if err != nil {
		return nil, wrap(ErrUCX, err)
	}
	b := append([]byte(addrMagic), addrVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, w.id)
	return append(b, a...), nil
}

const (
	addrMagic   = "pmra"
	addrVersion = 1
	addrHeader  = 16
)

// Dial connects to the worker whose Address is addr, waiting for the handshake until ctx
// ends; that worker takes the connection with Accept. An address that is not one a worker's
// Address gives (its reserved bytes zero), every byte of UCX's part checked as UCX reads it
// (ucx.CheckAddress), is refused with ErrDescriptor before UCX sees it; a worker's address
// given in a peer's hello is checked so too. Two workers that Dial each other at once, each
// hello sent before the other's came, get one connection: each Dial returns its end, and no
// Accept returns it (as TCP's simultaneous open); Dials that do not cross make two.
func (w *Worker) Dial(ctx context.Context, addr []byte) (*Conn, error) {
	if len(addr) <= addrHeader || string(addr[:4]) != addrMagic || addr[4] != addrVersion {
		return nil, fmt.Errorf("%w: not a worker address (%d bytes)", ErrDescriptor, len(addr))
	}
	if r := addr[5:8]; r[0]|r[1]|r[2] != 0 {
		return nil, fmt.Errorf("%w: worker address with reserved bytes % x", ErrDescriptor, r)
	}
	peer := binary.LittleEndian.Uint64(addr[8:])
	if err := ucx.CheckAddress(addr[addrHeader:]); err != nil {
		return nil, fmt.Errorf("%w: the address of worker %016x: %w", ErrDescriptor, peer, err)
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	own, err := w.uw.Address()
	if err != nil {
		w.mu.Unlock()
		return nil, wrap(ErrUCX, err)
	}
	ep, err := w.uw.ConnectAddress(addr[addrHeader:])
	if err != nil {
		w.mu.Unlock()
		return nil, fmt.Errorf("%w: dial worker %016x: %w", ErrPeer, peer, err)
	}
	c := newConn(w, ep, "")
	c.remote = fmt.Sprintf("worker %016x, connection %08x", peer, connTag(c.id)) // as the peer names it
	c.dialed = peer
	return w.handshake(ctx, c, own, peer)
}

// handshake sends c's hello (with the worker's own address when dialing) and waits for the
// peer's acknowledgement; peer, when not zero, is the worker the peer must be. Called with mu
// held; returns with it released.
func (w *Worker) handshake(ctx context.Context, c *Conn, own []byte, peer uint64) (*Conn, error) {
	hello := header(msgHello, 0, helloLen+len(own))
	hello[5] = helloVersion
	hello = appendGreeting(hello, greeting{conn: c.id, worker: w.id, pid: uint32(os.Getpid()), host: hostID(), addr: own}, true)
	err := w.sendLocked(c, c.ep, hello, true, nil)
	if err != nil {
		w.failConn(c, err)
	}
	w.signal()
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		w.mu.Lock()
		w.failConn(c, fmt.Errorf("%w: handshake with %s: %w", ErrPeer, c.remote, ctx.Err()))
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.state != connOpen {
		return nil, c.err
	}
	if peer != 0 && c.peer != peer {
		err := fmt.Errorf("%w: dialed worker %016x, worker %016x answered", ErrProtocol, peer, c.peer)
		w.failConn(c, err)
		return nil, err
	}
	return c, nil
}

// Accept returns the next connection Dialed to this worker, waiting until ctx ends. The
// connection goes to the worker address the dialer's hello names, which nothing proves is the
// dialer's own (package doc, Peers): authenticate a dialer in the program's own messages.
func (w *Worker) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-w.inbound:
		return c, nil
	case <-w.loopDone:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dialerName names a connection another worker's Dial of this one opened, for its errors and
// log lines, by the dialer's hello g: "a worker that dialed this one (it says worker
// 0123456789abcdef, pid 1234 on this host, connection 89abcdef)", or "on host id
// 89abcdef01234567" for another host id (hostID). The connection is the tag (connTag) of the
// dialer's id of its own, which sets apart two Dials of one worker. Every field is the
// dialer's word, unchecked (package doc, Peers), and hostile input: only its fixed-size
// numbers are named, each formatted as digits, so no byte of the hello reaches a message as it
// came, and the name is at most 128 bytes.
func dialerName(g greeting) string {
	if g.host == hostID() {
		return fmt.Sprintf("a worker that dialed this one (it says worker %016x, pid %d on this host, "+
			"connection %08x)", g.worker, g.pid, connTag(g.conn))
	}
	return fmt.Sprintf("a worker that dialed this one (it says worker %016x, pid %d on host id %016x, "+
		"connection %08x)", g.worker, g.pid, g.host, connTag(g.conn))
}

// sockaddr resolves "host:port" to a struct sockaddr_in or sockaddr_in6, as bytes.
func sockaddr(address string) ([]byte, *net.TCPAddr, error) {
	ta, err := net.ResolveTCPAddr("tcp", address)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: address %q: %w", ErrPeer, address, err)
	}
	if ta.IP == nil {
		ta.IP = net.IPv4zero
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		sa := make([]byte, 16) // sa_family, sin_port (network order), sin_addr, zero
		binary.NativeEndian.PutUint16(sa, 2)
		binary.BigEndian.PutUint16(sa[2:], uint16(ta.Port))
		copy(sa[4:], ip4)
		return sa, ta, nil
	}
	sa := make([]byte, 28) // sa_family, sin6_port, sin6_flowinfo, sin6_addr, sin6_scope_id
	binary.NativeEndian.PutUint16(sa, 10)
	binary.BigEndian.PutUint16(sa[2:], uint16(ta.Port))
	copy(sa[8:], ta.IP.To16())
	if ta.Zone != "" {
		if ifi, err := net.InterfaceByName(ta.Zone); err == nil {
			binary.NativeEndian.PutUint32(sa[24:], uint32(ifi.Index))
		}
	}
	return sa, ta, nil
}
