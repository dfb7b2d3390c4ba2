package remote

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestHelloOnConnectionRefused: a hello names the address to connect back to only for a Dial,
// whose hello comes on an endpoint UCX made for the dialer; one on an endpoint of a connection
// of this worker's (a client of its listener, connected, saying hello again), or with no
// endpoint to answer on (no honest hello is sent so), is dropped, where it made this worker
// connect to whatever worker address it named: a client of the listener, which need not know
// this worker's address, could make it open an endpoint and a connection for Accept to any.
func TestHelloOnConnectionRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, _, _, _, c2 := connectedPair(t, ctx)
	addr, err := w1.Address()
	if err != nil {
		t.Fatal(err)
	}
	g := greeting{conn: 77, worker: w1.id, pid: uint32(os.Getpid()), host: hostID(), addr: addr[addrHeader:]}
	hello := appendGreeting(header(msgHello, 0, helloLen+len(g.addr)), g, true)
	for _, ep := range []ucx.Ep{c2.ep, 0} {
		w2.mu.Lock()
		before := len(w2.conns)
		w2.message(ep, hello)
		after, inbound := len(w2.conns), len(w2.inbound)
		w2.mu.Unlock()
		if after != before || inbound != 0 {
			t.Fatalf("a hello on endpoint %#x, of a connection or none, made a connection: %d connections, %d of them for Accept", ep, after, inbound)
		}
	}
}
