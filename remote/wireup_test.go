package remote

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestDialThenCloseAtOnce: a Dial that has returned leaves no UCX wireup message queued on
// either side, so either worker may close at once. UCX 1.13 ends a process whose worker is
// destroyed, or whose TCP connection to a peer fails, while a wireup reply waits there for
// that connection (docs/ucx.md, "A peer gone while it connects"). The dialed worker's endpoint
// back to the dialer is the one UCX made for the dialer's request, and the hello's
// acknowledgement goes on it behind the reply: the dialer has the reply once it has the
// acknowledgement. A connection to a worker made on an endpoint of its own (the hello
// forged in TestHostileHelloNotLoggedRaw, to a second worker, closed at once) ended the test
// process in 3 of 6 runs of 50. A Dial that returned before the acknowledgement (its
// handshake not waited for) fails it: the dialer's Close at once took its hello with it.
func TestDialThenCloseAtOnce(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := 5 // each way; a Dial and two Closes take 50-150 ms here
	if os.Getenv("PINMALLOC_LONG") != "" {
		n = 50
	}
	for i := range 2 * n {
		dialed, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		dialer, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []*Worker{dialed, dialer} {
			t.Cleanup(func() { _ = w.Close() }) // a failed test's: ErrClosed after the loop's
		}
		addr, err := dialed.Address()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dialer.Dial(ctx, addr); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // the dialer goes at once, before the dialed worker's Accept
			if err := dialer.Close(); err != nil {
				t.Fatal(err)
			}
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = dialed.Accept(actx)
		acancel()
		if err != nil {
			t.Fatalf("the dialed worker's Accept: %v", err)
		}
		if err := dialed.Close(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if err := dialer.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDialClosedWorker: a Dial of the address of a worker that has closed (a peer restarted,
// its old address kept) fails with ErrPeer, and ends no process: TCP's connect is refused
// before UCX makes the endpoint, so no endpoint of UCX's is left connecting to the closed
// worker (where UCX 1.13 asserts when its retries end: docs/ucx.md).
func TestDialClosedWorker(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dialer := newWorker(t)
	for range 5 {
		gone, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gone.Close() }) // a failed test's: ErrClosed after the loop's
		addr, err := gone.Address()
		if err != nil {
			t.Fatal(err)
		}
		if err := gone.Close(); err != nil {
			t.Fatal(err)
		}
		if c, err := dialer.Dial(ctx, addr); !errors.Is(err, ErrPeer) {
			t.Fatalf("Dial of a closed worker's address: %v, %v; want ErrPeer", c, err)
		}
	}
}
