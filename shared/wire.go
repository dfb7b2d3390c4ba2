package shared

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// The socket protocol: the owner's server sends a hello (helloWords words, and the control
// region's and every region's memfd with SCM_RIGHTS) on accept; then the attached process
// sends requests of two words (op, argument) and reads replies of two words (status, value),
// one at a time. The socket closing, for any reason, detaches the process.
const (
	wireVersion = 2
	helloWords  = 11

	opGrant   = 1 // argument: grants wanted (contiguous); value: the first grant
	opRelease = 2 // argument: first grant<<32 | count
	opDetach  = 3

	stOK   = 0
	stFull = 1
	stBad  = 2
)

// hello is what the server tells a process as it attaches.
type hello struct {
	pool uint64
	slot int
	layout
	ctlSize uintptr
	backend Backend
}

func (h hello) encode() []byte {
	b := make([]byte, 8*helloWords)
	for i, v := range []uint64{ctlMagic, wireVersion, h.pool, uint64(h.slot), uint64(h.regions),
		uint64(h.regionSize), uint64(h.grantSize), uint64(h.slots), uint64(h.ringCap), uint64(h.ctlSize), uint64(h.backend)} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != 8*helloWords {
		return hello{}, fmt.Errorf("%w: hello of %d bytes", ErrProtocol, len(b))
	}
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if w(0) != ctlMagic || w(1) != wireVersion {
		return hello{}, fmt.Errorf("%w: not a pinmalloc shared pool of version %d", ErrProtocol, wireVersion)
	}
	h := hello{pool: w(2), slot: int(w(3)), layout: layout{regions: int(w(4)), regionSize: uintptr(w(5)),
		grantSize: uintptr(w(6)), slots: int(w(7)), ringCap: int(w(8))}, ctlSize: uintptr(w(9)), backend: Backend(w(10))}
	if h.regions <= 0 || h.regions > maxRegions || h.grantSize == 0 || h.regionSize%h.grantSize != 0 ||
		h.slots <= 0 || h.slots > maxSlots || h.slot >= h.slots || h.ringCap <= 0 ||
		h.ctlSize < uintptr(8*h.words()) || h.backend > VMM {
		return hello{}, fmt.Errorf("%w: hello with an impossible geometry", ErrProtocol)
	}
	return h, nil
}

// request sends a request and reads its reply.
func request(c *net.UnixConn, op, arg uint64) (status, value uint64, err error) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], op)
	binary.LittleEndian.PutUint64(b[8:], arg)
	if _, err := c.Write(b[:]); err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]), nil
}

// readRequest reads a request; an error means the process is gone.
func readRequest(c *net.UnixConn) (op, arg uint64, err error) {
	var b [16]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]), nil
}

// reply answers a request.
func reply(c *net.UnixConn, status, value uint64) error {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], status)
	binary.LittleEndian.PutUint64(b[8:], value)
	_, err := c.Write(b[:])
	return err
}

// peerCred returns the credentials of the process at the other end of c (SO_PEERCRED: the
// kernel's record of who connected, which the peer cannot forge).
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

// recvHello reads the hello and its file descriptors.
func recvHello(c *net.UnixConn, maxFds int) (hello, []int, error) {
	b := make([]byte, 8*helloWords)
	oob := make([]byte, unix.CmsgSpace(4*maxFds))
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return hello{}, nil, fmt.Errorf("%w: reading the pool's hello: %v", ErrRefused, err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return hello{}, nil, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		for _, m := range msgs {
			f, err := unix.ParseUnixRights(&m)
			if err == nil {
				fds = append(fds, f...)
			}
		}
	}
	if n == 0 && len(fds) == 0 {
		return hello{}, nil, fmt.Errorf("%w: the owner closed the connection (peer not allowed, or no slot free)", ErrRefused)
	}
	h, err := decodeHello(b[:n])
	if err == nil && len(fds) != 1+h.regions {
		err = fmt.Errorf("%w: %d file descriptors for %d regions", ErrProtocol, len(fds), h.regions)
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return hello{}, nil, err
	}
	return h, fds, nil
}
