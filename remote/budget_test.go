package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWorkerBoundFailsLargestHolder: a hostile peer whose connections fill the worker's bound
// on messages nobody received (queuedWorker) made the connection of the next message fail,
// whoever's it was: an honest peer's message, the first it sent, failed the honest connection.
// The connection holding the most fails instead, its messages dropped (their room given back),
// and the honest message is delivered; a hostile connection holding less stays open.
func TestWorkerBoundFailsLargestHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 6)
	honest, hostile := conns[0], conns[1:]
	size := msgOverhead + boundBody
	held := fillBound(t, w2, hostile, false)
	w2.mu.Lock()
	w2.message(0, boundMsg(honest)) // the honest peer's first message
	w2.mu.Unlock()
	if err := honest.Err(); err != nil {
		t.Fatalf("the honest connection failed, the hostile ones holding %v MiB: %v", held, err)
	}
	got, err := honest.Recv(ctx)
	if err != nil || len(got) != boundBody {
		t.Fatalf("the honest message: %d bytes, %v", len(got), err)
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
			t.Errorf("hostile connection %d, holding %d messages (the most: %d), ended with %v",
				i, held[i], most, err)
		}
		if _, err := c.Recv(ctx); !errors.Is(err, ErrProtocol) {
			t.Errorf("Recv on the failed hostile connection: %v; want ErrProtocol, its "+
				"messages dropped", err)
		}
	}
	if failed != 1 {
		t.Errorf("%d hostile connections failed; want 1, one holding the most", failed)
	}
	w2.mu.Lock()
	queued := w2.queued
	w2.mu.Unlock()
	want := 0
	for _, n := range held {
		want += n * size
	}
	if want -= most * size; queued != want {
		t.Errorf("the worker counts %d bytes queued; want %d, the failed connection's given back",
			queued, want)
	}
}

// TestWorkerBoundFailsArrivingLargest: where the connection whose message crosses the worker's
// bound holds the most, that message counted, it is the one that fails, its messages dropped,
// and the others, holding less, stay open with theirs.
func TestWorkerBoundFailsArrivingLargest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 5)
	const body = 1 << 20
	size := msgOverhead + body
	fill := queuedWorker / size / 5 // the first four each hold a fifth of the bound
	last := conns[len(conns)-1]
	w2.mu.Lock()
	sent := 0
	for i, c := range conns {
		m := append(header(msgData, c.id, body), make([]byte, body)...)
		most := fill
		if c == last {
			most = perConnMessages(body)
		}
		for n := 0; n < most && c.state == connOpen; n++ {
			w2.message(0, m)
			if c == last {
				sent++
			}
		}
		if c != last && c.state != connOpen {
			w2.mu.Unlock()
			t.Fatalf("connection %d failed holding %d messages: %v", i, fill, c.err)
		}
	}
	queued := w2.queued
	w2.mu.Unlock()
	err := last.Err()
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "the most") {
		t.Fatalf("the connection crossing the bound after %d messages, holding the most, ended "+
			"with %v; want ErrProtocol, the worker's bound", sent, err)
	}
	if sent <= fill {
		t.Fatalf("the last connection failed after %d messages, no more than the others' %d",
			sent, fill)
	}
	if _, err := last.Recv(ctx); !errors.Is(err, ErrProtocol) {
		t.Errorf("Recv on the failed connection: %v; want ErrProtocol, its messages dropped", err)
	}
	if want := 4 * fill * size; queued != want {
		t.Errorf("the worker counts %d bytes queued; want %d, the others'", queued, want)
	}
	for i, c := range conns[:4] {
		if err := c.Err(); err != nil {
			t.Errorf("connection %d, holding less, ended with %v", i, err)
		}
	}
}

// perConnMessages is the most messages of body bytes one connection queues (queuedMessages).
func perConnMessages(body int) int { return queuedMessages / (msgOverhead + body) }

// boundBody is the size of the messages the tests of the worker's bound queue.
const boundBody = 1 << 20

// boundMsg is a data message of boundBody bytes on c, as the progress goroutine hands it
// over: one buffer, which the queue keeps without a copy.
func boundMsg(c *Conn) []byte {
	return append(header(msgData, c.id, boundBody), make([]byte, boundBody)...)
}

// fillBound fills w's bound on messages nobody received (queuedWorker) with boundMsgs on the
// hostile connections, each under its own bound (queuedMessages), and, with bye, ends each
// after its messages as its peer would. It returns how many each holds, and fails t unless
// the next message crosses the bound, or, without bye, a hostile connection failed.
func fillBound(t *testing.T, w *Worker, hostile []*Conn, bye bool) (held []int) {
	t.Helper()
	size := msgOverhead + boundBody
	perConn := (queuedMessages - 2*boundBody) / size // under each connection's bound
	w.mu.Lock()
	defer w.mu.Unlock()
	held = make([]int, len(hostile))
	for i, c := range hostile {
		m := boundMsg(c)
		for ; held[i] < perConn && w.queued+size <= queuedWorker; held[i]++ {
			w.message(0, m)
		}
		if bye {
			w.message(0, header(msgBye, c.id, 0))
		} else if c.state != connOpen {
			t.Fatalf("hostile connection %d failed under every bound: %v", i, c.err)
		}
	}
	if w.queued+size <= queuedWorker {
		t.Fatalf("the hostile connections hold %v messages of %d bytes, not the worker's bound",
			held, boundBody)
	}
	return held
}
