package remote

import (
	"fmt"
	"weak"
)

// The worker's bound on the messages nobody received, every connection's together
// (queuedWorker): who loses messages once it is reached.

// endedHolder is a connection reaped (out of the worker's conns) with messages nobody received
// still counted in the worker's bound: weak, so that a Conn its user drops still gives its
// bytes back (msgShare), and with its msgBytes, which outlives it.
type endedHolder struct {
	c weak.Pointer[Conn]
	n *int
}

// keepEnded keeps c, reaped with messages nobody received, among the candidates of makeRoom.
// The list is compacted when full, without the connections that hold nothing any more. Under
// mu.
func (w *Worker) keepEnded(c *Conn) {
	if len(w.ended) == cap(w.ended) {
		kept := w.ended[:0]
		for _, e := range w.ended {
			if *e.n > 0 {
				kept = append(kept, e)
			}
		}
		clear(w.ended[len(kept):])
		w.ended = kept
	}
	w.ended = append(w.ended, endedHolder{c: weak.Make(c), n: c.msgBytes})
}

// makeRoom makes room for a message of size bytes of c's beyond the bytes of messages nobody
// received that the worker's connections queue together (queuedWorker): the connection holding
// the most, c with the message counted, loses its messages, until the message fits or c is the
// one. Every connection holding messages is a candidate, open or ended: an open one fails with
// ErrProtocol; an ended one (closed or failed, its messages left for Recv) says so in its error
// from then on. So a peer that floods the worker, with connections each under their own bound,
// loses its own connections' messages, not the next connection to receive a message, which may
// be an honest peer's, even where it closed its connections after filling them. It reports
// whether the message fits. It looks at every connection, only once the bound is reached.
// Under mu.
func (w *Worker) makeRoom(c *Conn, size int) bool {
	for w.queued+size > queuedWorker {
		most, n, freed := c, *c.msgBytes+size, false
		for _, o := range w.conns {
			if *o.msgBytes > n {
				most, n = o, *o.msgBytes
			}
		}
		for _, e := range w.ended {
			if *e.n <= n {
				continue
			}
			o := e.c.Value()
			if o == nil { // dropped by its user: its cleanup (msgShare) is due; its bytes back now
				w.queued -= *e.n
				*e.n = 0
				freed = true
				continue
			}
			most, n = o, *e.n
		}
		if freed { // the message may fit now
			continue
		}
		w.loseMessages(most, n)
		if most == c {
			return false
		}
	}
	return true
}

// loseMessages drops the n bytes of messages nobody received that c holds, the most of the
// worker's connections, for the worker's bound: an open c fails with ErrProtocol, an ended one
// keeps its end in its error. Under mu.
func (w *Worker) loseMessages(c *Conn, n int) {
	why := fmt.Sprintf("%s held %d bytes of messages nobody received, the most of this "+
		"worker's connections, when they reached the %d bytes it queues: dropped",
		c.remote, n, queuedWorker)
	if c.state == connFailed {
		c.err = fmt.Errorf("%w: %s, after it ended (%v)", ErrProtocol, why, c.err)
		w.logf("%v", c.err) // why names c.remote
	} else {
		w.failConn(c, fmt.Errorf("%w: %s", ErrProtocol, why))
	}
	w.dropMessages(c)
}

// dropMessages drops the messages of c's that nobody received, and gives their bytes back to
// the worker's bound. Under mu.
func (w *Worker) dropMessages(c *Conn) {
	w.queued -= *c.msgBytes
	*c.msgBytes = 0
	clear(c.msgs)
	c.msgs = nil
	select { // a Recv waiting for a put before a message waits on recv, not dead
	case c.recv <- struct{}{}:
	default:
	}
}
