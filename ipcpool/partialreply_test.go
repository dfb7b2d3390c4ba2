package ipcpool

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// An owner whose reply to a process went out in part (errPartial) cuts the connection, as the
// process does when its own message goes out in part: the process would read the rest of the
// stream a torn message off, the next reply's first half taken for this one's end. (The owner
// gave the grants of a torn grant reply back and went on serving: the next answer reached the
// process as the tail of a message.) The peer is raw: it asks for a grant, whose reply the
// owner's write takes in part, then detaches; it must read the part and then the connection's
// end, not the detach's answer.
func TestOwnerReplyWrittenInPartCutsTheConnection(t *testing.T) {
	const seq = 7777
	t.Cleanup(func() { connWrite = (*net.UnixConn).Write }) // (after the owner's Close)
	connWrite = func(c *net.UnixConn, b []byte) (int, error) {
		if len(b) == msgSize && binary.LittleEndian.Uint32(b) == opReply && binary.LittleEndian.Uint64(b[8:]) == seq {
			n, _ := c.Write(b[:msgSize/2])
			return n, io.ErrShortWrite
		}
		return c.Write(b)
	}
	w, path := serveTest(t, Options{})

	c := dialOwner(t, path)
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
	_, fds, err := recvFds(c, make([]byte, 8*helloWords), 1+maxRegions)
	must(t, "hello", err)
	closeFds(fds)
	must(t, "ready", writeMsg(c, msg{op: opReady}, time.Second))
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("the answer to ready: %+v %v", m, err)
	}
	must(t, "grant", writeMsg(c, msg{op: opGrant, seq: seq, a: 1, b: uint64(time.Second)}, time.Second))
	part := make([]byte, msgSize/2)
	_, err = io.ReadFull(c, part)
	must(t, "the reply's part", err)
	_ = writeMsg(c, msg{op: opDetach, seq: seq + 1}, time.Second) // (a broken pipe, cut off already)
	// The rest, to the connection's end (dialOwner's deadline: five seconds).
	rest, err := io.ReadAll(c)
	if len(rest) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after a reply written in part: %d bytes more, then %v; want the connection's end", len(rest), err)
	}
	waitFor(t, func() bool { return w.SharedStats().Pool.Held == w.src.grantsHeld() })
}
