package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Forgetting a peer's regions.
//
// A connection knows the peer's regions that descriptors named (rkeyEntry: the range and key of
// the first, its key unpacked once), at most maxRegionsPerConn at once. A region a pool gives
// back (its arena releasing it, the pool's Close) or whose registration is closed is
// deregistered for good: its id is never used again by its worker (nextReg). So a worker tells
// each open connection's peer of the regions it deregisters (Unmapping queues their ids,
// the progress goroutine sends them, forgetMax a message: msgForget), and the peer forgets
// them: the entry leaves the connection's table, so that the bound counts the peer's live
// regions, not every region a long-lived connection ever saw.
//
// A forget is the peer's word like any other, and can only make this side forget what the
// peer itself described on this connection: an id the connection does not know (never
// described here, forgotten already, or a guess) is ignored, a body that is not one
// appendForget writes fails the connection (ErrProtocol). A region forgotten while transfers
// use its key (UCX's puts and gets in flight name it; a copy reads and writes the segment it
// keeps attached, direct.go) leaves the table at once and keeps its key until the last of them
// ends (users, retired); they complete, or fail as any transfer to a region its owner gave back
// (by message: the target refuses it). A descriptor of a forgotten region is learned again as a
// new one: a stale descriptor its owner refuses, or a lying peer's churn, bounded as the table is.
//
// A peer of protocol version 1 before this message ignores it: its connections then count every
// region they saw, as before.
//
// The ids wait in the connection's queue until a control slot is free for their message. The
// worker's control slots are shared so that only the connection's own peer can keep them from
// it (takeSlot): a connection's messages hold connMessages of them at most, and one is kept for
// each connection that holds none, which only that connection's message takes. A peer that
// reads nothing keeps the messages of its own connection in flight and no other's: so the
// forgets of every other connection go while it stalls, and its own queue grows. The queue is
// bounded (maxForgets ids, 64 KiB), and a connection whose queue would pass it fails with
// ErrProtocol: dropping ids would leave the peer counting regions that are gone (each refused
// for good once its bound is reached), and nothing smaller than the ids can tell it which. (A
// slot is kept for each connection only while the worker has fewer connections than control
// slots, 1,024, and endpoint closes in flight take none of those kept.)

// forgetMax is the most region ids one msgForget carries (4 KiB of them).
const forgetMax = 1024

// maxForgets bounds a connection's queue of region ids to tell its peer of (16 messages' worth):
// a connection none of whose forgets could go while that many regions were deregistered fails.
const maxForgets = 16 * forgetMax

// appendForget appends a msgForget's body naming ids (1 to forgetMax of them, none zero).
func appendForget(b []byte, ids []uint32) []byte {
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return b
}

// parseForget reports whether body is a msgForget's body as appendForget writes it: 1 to
// forgetMax region ids, none zero. Its ids are then body's 4-byte words (forgetID).
func parseForget(body []byte) (n int, ok bool) {
	if len(body) == 0 || len(body)%4 != 0 || len(body) > 4*forgetMax {
		return 0, false
	}
	n = len(body) / 4
	for i := range n {
		if forgetID(body, i) == 0 {
			return 0, false
		}
	}
	return n, true
}

// forgetID returns the i-th region id of a msgForget's body.
func forgetID(body []byte, i int) uint32 { return binary.LittleEndian.Uint32(body[4*i:]) }

// forgetMessage takes the peer's msgForget on c. Under mu.
func (w *Worker) forgetMessage(c *Conn, body []byte) {
	if c.state != connOpen {
		return
	}
	n, ok := parseForget(body)
	if !ok {
		w.failConn(c, fmt.Errorf("%w: %s sent a malformed forget of regions (%d bytes)", ErrProtocol, c.remote, len(body)))
		return
	}
	for i := range n {
		w.forget(c, forgetID(body, i))
	}
}

// forget drops the peer's region id from c's table: its key is destroyed now, or once the
// transfers that use it end (unuse). An id c does not know is ignored. Under mu.
func (w *Worker) forget(c *Conn, id uint32) {
	e := c.rkeys[id]
	if e == nil {
		return
	}
	delete(c.rkeys, id)
	if e.users > 0 && e.rkey != 0 {
		e.retired = true
		c.retired = append(c.retired, e)
		return
	}
	w.destroyRkey(c, e)
}

// use counts e's key as used by t until t ends (completed, unuse). Under mu.
func (t *Transfer) use(e *rkeyEntry) {
	if n := len(t.rks); n > 0 && t.rks[n-1] == e {
		return // a batch's operations share few regions: counted once each run
	}
	e.users++
	t.rks = append(t.rks, e)
}

// unuse lets go of the keys a transfer of c used (rks), now that it has ended: a key the peer
// forgot meanwhile is destroyed after its last user. Under mu.
func (w *Worker) unuse(c *Conn, rks []*rkeyEntry) {
	for _, e := range rks {
		if e.users--; e.users > 0 || !e.retired {
			continue
		}
		e.retired = false
		w.destroyRkey(c, e)
		for i, r := range c.retired {
			if r == e {
				last := len(c.retired) - 1
				c.retired[i], c.retired[last] = c.retired[last], nil
				c.retired = c.retired[:last]
				break
			}
		}
	}
}

// forgotten queues region id, deregistered, to be told to the peer of every open connection
// (sendForgets); a connection whose queue holds maxForgets ids already fails with ErrProtocol.
// Under mu.
func (w *Worker) forgotten(id uint32) {
	for _, c := range w.conns {
		if c.state != connOpen {
			continue
		}
		if len(c.forgets) >= maxForgets {
			w.failConn(c, fmt.Errorf("%w: no message to %s could go (%d of this worker's messages to it in flight: a peer that reads nothing) while %d regions of this worker were deregistered: the regions it knows of this worker can no longer be kept right", ErrProtocol, c.remote, c.msgSlots, maxForgets))
			c.forgets = nil
			continue
		}
		c.forgets = append(c.forgets, id)
		if !c.forgetting {
			c.forgetting = true
			w.forgetting = append(w.forgetting, c)
		}
	}
	if len(w.forgetting) > 0 {
		w.signal()
	}
}

// sendForgets tells the peers the regions deregistered since the last round (forgotten), up to
// forgetMax a message; what finds no slot for its message waits for the next round. By the
// progress goroutine, under mu: nothing is done, and nothing allocated, when none waits.
func (w *Worker) sendForgets() {
	if len(w.forgetting) == 0 {
		return
	}
	kept := w.forgetting[:0]
	for _, c := range w.forgetting {
		for len(c.forgets) > 0 && c.state == connOpen && len(w.free) > 0 {
			ids := c.forgets[:min(len(c.forgets), forgetMax)]
			m := appendForget(header(msgForget, c.peerID, 4*len(ids)), ids)
			if err := w.sendLocked(c, c.ep, m, false, nil); err != nil {
				if !errors.Is(err, ErrBusy) {
					c.forgets = c.forgets[:0] // UCX refused the send: the connection is failing
				}
				break // else no slot: next round
			}
			c.forgets = c.forgets[len(ids):]
		}
		if len(c.forgets) > 0 && c.state == connOpen {
			kept = append(kept, c)
			continue
		}
		c.forgets, c.forgetting = nil, false
	}
	clear(w.forgetting[len(kept):])
	w.forgetting = kept
}
