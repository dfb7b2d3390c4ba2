package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestAnswersBoundedPerWorker: the answers waiting for a slot are bounded per connection
// (maxQueuedAnswers, TestAnswerQueueBounded), but were not for the worker: a peer that opened
// connections and flooded each with gets, each kept under the connection's bound while it read
// no answer, made the worker hold that bound times the connections. Past the worker's bound
// (answersWorker, lowered here), the connection with the most waiting fails with ErrProtocol
// and its answers are dropped: here the bound is reached by the hostile connections, and the
// honest peer's first get, which crosses it, is queued; the worker never has more waiting.
func TestAnswersBoundedPerWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 6)
	honest, hostile := conns[0], conns[1:]
	const perConn = 100 // under each connection's bound
	w2.mu.Lock()
	w2.answerBound = 2 * perConn
	w2.answersBound = 3*perConn + 10
	saved := w2.nanswer
	w2.nanswer = w2.opts.MaxInFlight // every answer slot in flight: a peer that reads none
	held := make([]int, len(hostile))
	for i, c := range hostile { // each a different count: one holds the most
		for ; held[i] < perConn+i && w2.answering < w2.answersBound; held[i]++ {
			floodGet(w2, c, held[i])
		}
		if c.state != connOpen {
			w2.mu.Unlock()
			t.Fatalf("hostile connection %d failed under every bound: %v", i, c.err)
		}
	}
	full := w2.answering
	floodGet(w2, honest, 0) // the honest peer's first get
	after, mine := w2.answering, honest.answering
	sum := 0
	for _, c := range w2.conns {
		sum += c.answering
	}
	w2.nanswer = saved
	w2.mu.Unlock()
	if full != w2.answersBound {
		t.Fatalf("the hostile connections have %d answers waiting (%v), not the bound %d",
			full, held, w2.answersBound)
	}
	if err := honest.Err(); err != nil || mine != 1 {
		t.Fatalf("the honest peer's first get, crossing the worker's bound: %d answers waiting, "+
			"the connection ended with %v; want it queued", mine, err)
	}
	most := 0
	for _, n := range held {
		most = max(most, n)
	}
	failed := 0
	for i, c := range hostile {
		err := c.Err()
		if err == nil {
			continue
		}
		failed++
		if held[i] != most || !errors.Is(err, ErrProtocol) ||
			!strings.Contains(err.Error(), "the most") {
			t.Errorf("hostile connection %d, %d answers waiting (the most: %d), ended with %v",
				i, held[i], most, err)
		}
	}
	if failed != 1 {
		t.Errorf("%d hostile connections failed; want 1, the one with the most waiting", failed)
	}
	if want := full - most + 1; after != want || sum != after {
		t.Errorf("the worker counts %d answers waiting, its connections %d; want %d, the "+
			"failed connection's dropped", after, sum, want)
	}
}

// floodGet is a peer's get on c, naming no region of w's: its refusal waits for an answer
// slot when none is free. Under w.mu.
func floodGet(w *Worker, c *Conn, n int) {
	var ev ucx.Event
	ev.Kind = ucx.EventData
	h := dataHeader{kind: dataGet, conn: c.id, op: uint64(n)<<32 | 1, addr: 4096, n: 64,
		region: 1 << 30, base: 4096, size: 1 << 20}
	h.encode(&ev.Header)
	w.data(&ev)
}

// TestAnswersCountedOutWithTheirConn: the worker's count of answers waiting (answersWorker)
// gives back those of a connection that fails, whether they waited for a slot or, gets of a
// live buffer, for their buffer's hold (w.unheld), so that a peer's connections that failed
// hold none of the bound.
func TestAnswersCountedOutWithTheirConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, r2, _, c2 := connectedPair(t, ctx)
	d := describe(t, r2, liveBuffer(t, r2, 4096))
	w2.mu.Lock()
	saved := w2.nanswer
	w2.nanswer = w2.opts.MaxInFlight // every answer slot in flight
	var ev ucx.Event
	ev.Kind = ucx.EventData
	for i := range 10 {
		h := dataHeader{kind: dataGet, conn: c2.id, op: uint64(i)<<32 | 1, addr: d.addr, n: d.n,
			region: d.region, base: d.base, size: d.size}
		h.encode(&ev.Header)
		w2.data(&ev)        // waits for its buffer's hold
		floodGet(w2, c2, i) // refused: waits for a slot
	}
	before := w2.answering
	w2.failConn(c2, ErrClosed)
	after := w2.answering
	w2.nanswer = saved
	w2.mu.Unlock()
	if before != 20 || after != 0 {
		t.Fatalf("the worker counts %d answers waiting, then %d once their connection failed; "+
			"want 20, then 0", before, after)
	}
}
