package remote

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"
)

// TestWorkerBoundCountsEndedHolders: a hostile peer filled the worker's bound on messages nobody
// received (queuedWorker) with connections each under their own bound, then closed them: ended,
// they were no candidates of the bound's, yet their messages stayed counted, so the next honest
// message found no open connection holding more than itself and failed the honest connection.
// The ended connection holding the most loses its messages instead: its Recv returns
// ErrProtocol, saying they were dropped; the other ended ones still return theirs.
func TestWorkerBoundCountsEndedHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 6)
	honest, hostile := conns[0], conns[1:]
	held := fillBound(t, w2, hostile, true)
	for i, c := range hostile { // their endpoints closed: the worker forgets them
		select {
		case <-c.reapedCh:
		case <-ctx.Done():
			t.Fatalf("hostile connection %d was not reaped: %v", i, ctx.Err())
		}
	}
	w2.mu.Lock()
	w2.message(0, boundMsg(honest)) // the honest peer's first message
	w2.mu.Unlock()
	if err := honest.Err(); err != nil {
		t.Fatalf("the honest connection failed, the closed hostile ones holding %v MiB: %v",
			held, err)
	}
	if got, err := honest.Recv(ctx); err != nil || len(got) != boundBody {
		t.Fatalf("the honest message: %d bytes, %v", len(got), err)
	}
	most := 0
	for _, n := range held {
		most = max(most, n)
	}
	dropped, kept := 0, 0
	for i, c := range hostile {
		n := 0
		var err error
		for err == nil {
			if _, err = c.Recv(ctx); err == nil {
				n++
			}
		}
		switch {
		case n == held[i] && errors.Is(err, ErrClosed):
			kept += n
		case n == 0 && held[i] == most && errors.Is(err, ErrProtocol) &&
			!errors.Is(err, ErrClosed) && strings.Contains(err.Error(), "dropped"):
			dropped++ // not ErrClosed: no user takes it for the peer's clean end
		default:
			t.Errorf("closed hostile connection %d, holding %d messages (the most: %d): "+
				"received %d, then %v", i, held[i], most, n, err)
		}
	}
	if dropped != 1 {
		t.Errorf("%d closed hostile connections lost their messages; want 1", dropped)
	}
	w2.mu.Lock()
	queued := w2.queued
	w2.mu.Unlock()
	if queued != 0 {
		t.Errorf("every message received or dropped, the worker counts %d bytes queued", queued)
	}
	if kept+most != sumOf(held) {
		t.Errorf("received %d messages of the closed connections and dropped %d; they held %d",
			kept, most, sumOf(held))
	}
}

func sumOf(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// TestWorkerBoundEndedHolderDropped: an ended connection holding messages that its user dropped
// (collected, its cleanup not yet run) gives its bytes back to the worker's bound once the
// bound is reached, without its cleanup (which takes the worker's lock that makeRoom holds), and
// the honest message is delivered.
func TestWorkerBoundEndedHolderDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 1)
	honest := conns[0]
	// A reaped connection holding the worker's bound, all but an empty message's room, then
	// dropped by its user.
	n := new(int)
	*n = queuedWorker - msgOverhead
	var wp weak.Pointer[Conn]
	func() {
		c := &Conn{msgBytes: n}
		wp = weak.Make(c)
		w2.mu.Lock()
		w2.queued += *n
		w2.ended = append(w2.ended, endedHolder{c: wp, n: n})
		w2.mu.Unlock()
	}()
	for i := 0; wp.Value() != nil; i++ {
		if i == 10 {
			t.Fatal("the dropped Conn is still reachable after 10 collections")
		}
		runtime.GC()
	}
	w2.mu.Lock()
	w2.message(0, boundMsg(honest))
	queued := w2.queued
	w2.mu.Unlock()
	if got, err := honest.Recv(ctx); err != nil || len(got) != boundBody {
		t.Fatalf("the honest message: %d bytes, %v", len(got), err)
	}
	if want := msgOverhead + boundBody; queued != want || *n != 0 {
		t.Errorf("the worker counts %d bytes queued, the dropped Conn %d; want %d and 0",
			queued, *n, want)
	}
}
