package ipcpool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The socket protocol. Every message is msgSize bytes, little-endian: op and flags (32 bits
// each), a sequence number and two arguments (64 bits each). A connection opens with the
// client's intro (what it is: a process that attaches, one that rejoins a new owner, or one
// that hands a new owner the pool's memory); the owner answers an attach with a hello
// (helloWords words, and the control region's and every region's descriptor by SCM_RIGHTS),
// and the process answers with ready (or abort, when it cannot use the pool). Then the
// process sends requests (grant, release, detach) and the owner replies by sequence number;
// replies may come in any order, and a release has none. A rejoin's intro is followed by the
// process's slot and serial (rejoin); the owner asks for the pool's descriptors if it has no
// memory yet (stDonate), then for the grants the process holds (stClaims: opClaim runs), and
// answers; requests follow as after an attach.
//
// Everything read from the socket is checked (decodeMsg, decodeHello, checkClaim) before it
// is used: a peer that sends garbage gets ErrProtocol and is cut off.
const (
	wireVersion = 4
	msgSize     = 32
	helloWords  = 16

	opIntro   = 1  // flags: introKind; seq: wireVersion; a: ctlMagic; b: a rejoin's pool id
	opHello   = 2  // (the hello is its own message: see hello)
	opReady   = 3  // a: the process's flags (flagDevice)
	opAbort   = 4  // the process cannot use the pool: its slot is free at once
	opGrant   = 5  // a: grants wanted (one run); b: how long the process waits, in ns; reply value: the first grant
	opRelease = 6  // a: the first grant; b: how many; no reply
	opDetach  = 7  // a: detachKept or 0; reply once the process's memory is back (or kept)
	opReply   = 8  // seq: the request's; a: status; b: value
	opDonate  = 9  // the pool's memory for a new owner, with the descriptors (adopt.go)
	opRejoin  = 10 // after a rejoin's intro: a: the slot; b: its serial
	opClaim   = 11 // (a rejoin, asked by stClaims) a run of grants the process holds: a: the first; b: how many (0: the last message)
	opMax     = opClaim

	stOK      = 0
	stFull    = 1 // no grants free (and none came back before the deadline)
	stRefused = 2 // a request this process may not make
	stDonate  = 3 // (to a rejoin) the owner has no memory yet: send the pool's descriptors
	stClaims  = 4 // (to a rejoin) the owner knows the process: send the grants it holds (opClaim)
)

// detachKept, in a detach, says the process still maps the pool's memory (a VMM mapping the
// driver refused to unmap): the owner keeps what it held, as for a process gone alive, until it
// exits.
const detachKept = 1

// introKind says what a connecting process is.
const (
	introAttach = 1
	introRejoin = 2 // a process of the previous owner, keeping its slot (adopt.go)
	introDonate = 3 // a process handing a new owner the pool's descriptors (adopt.go)
	introMax    = introDonate
)

// msg is one message of the protocol.
type msg struct {
	op, flags uint32
	seq, a, b uint64
}

func (m msg) encode() (b [msgSize]byte) {
	binary.LittleEndian.PutUint32(b[0:], m.op)
	binary.LittleEndian.PutUint32(b[4:], m.flags)
	binary.LittleEndian.PutUint64(b[8:], m.seq)
	binary.LittleEndian.PutUint64(b[16:], m.a)
	binary.LittleEndian.PutUint64(b[24:], m.b)
	return b
}

// decodeMsg decodes a message, refusing one that is not of this protocol.
func decodeMsg(b []byte) (msg, error) {
	if len(b) != msgSize {
		return msg{}, fmt.Errorf("%w: a message of %d bytes", ErrProtocol, len(b))
	}
	m := msg{op: binary.LittleEndian.Uint32(b[0:]), flags: binary.LittleEndian.Uint32(b[4:]),
		seq: binary.LittleEndian.Uint64(b[8:]), a: binary.LittleEndian.Uint64(b[16:]), b: binary.LittleEndian.Uint64(b[24:])}
	if m.op == 0 || m.op > opMax || m.op == opHello {
		return msg{}, fmt.Errorf("%w: operation %d", ErrProtocol, m.op)
	}
	if m.op == opIntro && (m.a != ctlMagic || m.seq != wireVersion || m.flags == 0 || m.flags > introMax) {
		return msg{}, fmt.Errorf("%w: not an ipcpool client of version %d", ErrProtocol, wireVersion)
	}
	return m, nil
}

// hello is what the owner tells a process as it attaches.
type hello struct {
	pool   uint64
	slot   int
	serial uint64
	layout
	ctlSize uintptr
	vmm     bool   // the regions are exported CUDA host granules, not memfds
	epoch   uint64 // the owner's epoch (hOwnerEpoch)
}

func (h hello) encode() []byte {
	b := make([]byte, 8*helloWords)
	var vmm uint64
	if h.vmm {
		vmm = 1
	}
	for i, v := range []uint64{ctlMagic, wireVersion, h.pool, uint64(h.slot), h.serial, uint64(h.regions),
		uint64(h.regionSize), uint64(h.grantSize), uint64(h.slots), uint64(h.ringCap), uint64(h.exports),
		uint64(h.ctlSize), vmm, h.epoch} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// decodeHello decodes a hello and checks every field before anything is sized by it: a hello
// claiming rings of 2^62 entries, grants of 16 bytes or a slot beyond the slots is refused.
func decodeHello(b []byte) (hello, error) {
	if len(b) != 8*helloWords {
		return hello{}, fmt.Errorf("%w: a hello of %d bytes", ErrProtocol, len(b))
	}
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if w(0) != ctlMagic || w(1) != wireVersion {
		return hello{}, fmt.Errorf("%w: not an ipcpool pool of version %d", ErrProtocol, wireVersion)
	}
	for i := 3; i <= 12; i++ {
		if w(i) > maxPoolSize { // no field of a geometry is near 2^63: int conversions stay exact
			return hello{}, fmt.Errorf("%w: hello word %d is %#x", ErrProtocol, i, w(i))
		}
	}
	h := hello{pool: w(2), slot: int(w(3)), serial: w(4), layout: layout{regions: int(w(5)), regionSize: uintptr(w(6)),
		grantSize: uintptr(w(7)), slots: int(w(8)), ringCap: int(w(9)), exports: int(w(10))},
		ctlSize: uintptr(w(11)), vmm: w(12) == 1, epoch: w(13)}
	if err := h.layout.check(); err != nil {
		return hello{}, fmt.Errorf("%w: hello with %v", ErrProtocol, err)
	}
	if h.slot >= h.slots || h.serial == 0 || w(12) > 1 || h.ctlSize < h.ctlBytes() || h.ctlSize > 1<<40 {
		return hello{}, fmt.Errorf("%w: hello with slot %d of %d, serial %d, a control region of %d bytes (want %d)",
			ErrProtocol, h.slot, h.slots, h.serial, h.ctlSize, h.ctlBytes())
	}
	return h, nil
}

// writeMsg writes m, within d. A write that times out (os.ErrDeadlineExceeded) wrote nothing:
// a Unix stream socket queues a message of msgSize bytes whole or not at all, so that the
// connection still carries whole messages and m may be sent again. A kernel short of memory
// for it (ENOBUFS, ENOMEM) queues nothing either: with a d, the write is tried again, a
// millisecond apart and more, and once d has passed it fails as a timeout does, so that the
// caller sends a release again rather than losing it (another error is the connection's end).
// Should part of m have gone, the error is errPartial instead: the connection is of no further
// use.
func writeMsg(c *net.UnixConn, m msg, d time.Duration) error {
	var end time.Time
	if d > 0 {
		end = time.Now().Add(d)
		_ = c.SetWriteDeadline(end)
		defer c.SetWriteDeadline(time.Time{})
	}
	b := m.encode()
	for pause := time.Millisecond; ; pause = min(2*pause, 16*time.Millisecond) {
		n, err := connWrite(c, b[:])
		switch {
		case err == nil:
			return nil
		case n > 0:
			return fmt.Errorf("%w (%d of %d bytes): %v", errPartial, n, msgSize, err)
		case d <= 0 || !(errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM)):
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return fmt.Errorf("%w: the kernel had no memory for the message (%v)", os.ErrDeadlineExceeded, err)
		}
		time.Sleep(min(pause, left))
	}
}

// connWrite writes b on c for writeMsg (tests replace it: a write the kernel takes in part).
var connWrite = (*net.UnixConn).Write

// errPartial is writeMsg's error for a message written in part: the connection is broken.
var errPartial = errors.New("ipcpool: a message written in part")

// readMsg reads and decodes a message.
func readMsg(c *net.UnixConn) (msg, error) {
	var b [msgSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return msg{}, err
	}
	return decodeMsg(b[:])
}

// peerCred returns the credentials of the process at the other end of c (SO_PEERCRED: the
// kernel's record of who connected, or who listened, which the peer cannot forge).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// sendFds sends b with the descriptors fds.
func sendFds(c *net.UnixConn, b []byte, fds []int, d time.Duration) error {
	_ = c.SetWriteDeadline(time.Now().Add(d))
	defer c.SetWriteDeadline(time.Time{})
	_, _, err := c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	return err
}

// recvFds reads one message of at most len(b) bytes with at most maxFds descriptors. It
// returns the bytes read and the descriptors; on error it has closed every descriptor.
func recvFds(c *net.UnixConn, b []byte, maxFds int) (int, []int, error) {
	oob := make([]byte, unix.CmsgSpace(4*maxFds))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				if f, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: %v", ErrProtocol, perr)
		}
	}
	if err == nil && flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		err = fmt.Errorf("%w: a message or its descriptors cut short", ErrProtocol)
	}
	if err != nil {
		closeFds(fds)
		return 0, nil, err
	}
	return n, fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
