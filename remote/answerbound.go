package remote

import "fmt"

// The worker's bound on the answers to peers' data messages waiting for a slot or a hold, every
// connection's together (answersWorker): who loses them once it is reached.

// answersWorker bounds the answers waiting on all of a worker's connections together (some
// 54 MiB of queue): each connection's are bounded (maxQueuedAnswers, some 900 KiB), but a peer
// that opened many connections and flooded each with gets it does not read the answers of made
// the worker hold that bound times their number. An honest peer has dataWindow of them at most
// on a connection: a peer needs 64 connections, each flooded to its bound, to make an honest
// one with its whole window waiting the largest holder (answerRoom).
const answersWorker = 64 * maxQueuedAnswers

// answerRoom makes room for one more answer of c's to wait beyond the answers the worker's
// connections have waiting together (answersWorker): the connection with the most waiting, c
// with the new one counted, fails with ErrProtocol and its answers are dropped, until the
// answer fits or c is the one. So a peer that floods the worker with gets, with connections
// each under their own bound, loses its own connections, not the next connection to be
// answered, which may be an honest peer's. It reports whether the answer fits. It looks at
// every connection, only once the bound is reached. Under mu.
func (w *Worker) answerRoom(c *Conn) bool {
	for w.answering >= w.answersBound {
		most, n := c, c.answering+1
		for _, o := range w.conns {
			if o.answering > n {
				most, n = o, o.answering
			}
		}
		w.failConn(most, fmt.Errorf("%w: %s had %d answers waiting, the most of this worker's "+
			"connections, when they reached the %d answers it keeps waiting",
			ErrProtocol, most.remote, n, w.answersBound))
		if most == c {
			return false
		}
	}
	return true
}
