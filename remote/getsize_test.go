package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestOversizeGetRefused: a peer's get by message named any length inside a live buffer, and
// the target answered it whole: a request of 64 bytes made it send a buffer of any size (here
// 1 MiB; the buffer held until the peer took it all), where an honest peer asks for getPart
// bytes at most (splitData) and refuses a longer answer itself (dataMax). A longer get fails
// its connection with ErrProtocol, as a longer put does, and nothing is answered.
func TestOversizeGetRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, r2, _, c2 := connectedPair(t, ctx)
	d := describe(t, r2, liveBuffer(t, r2, 1<<20))
	w2.mu.Lock()
	var ev ucx.Event
	ev.Kind = ucx.EventData
	h := dataHeader{kind: dataGet, conn: c2.id, op: 1, addr: d.addr, n: d.n, region: d.region,
		base: d.base, size: d.size}
	h.encode(&ev.Header)
	w2.data(&ev)
	queued := len(w2.unheld)
	w2.mu.Unlock()
	if err := c2.Err(); !errors.Is(err, ErrProtocol) || queued != 0 {
		t.Fatalf("a get of %d bytes (the most an honest peer asks: %d): %d answers queued, the "+
			"connection ended with %v; want none, ErrProtocol", d.n, getPart, queued, err)
	}
}
