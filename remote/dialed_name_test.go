package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestDialedConnNamesDialer: every connection a Dial opened on the worker it dialed was named
// "a worker that dialed this one", the same for every dialer, so its errors and log lines could
// not tell dialers apart. Each is named by what its dialer's hello says now, as its word, once;
// the dialing side by the worker its caller's address names.
func TestDialedConnNamesDialer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	dialed := newWorker(t)
	addr, err := dialed.Address()
	if err != nil {
		t.Fatal(err)
	}
	var conns []*Conn
	for _, w := range []*Worker{newWorker(t), newWorker(t)} {
		c, err := w.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("worker %016x, connection %08x", dialed.ID(), connTag(c.id)); c.remote != want {
			t.Errorf("the dialing side's connection is named %q; want %q", c.remote, want)
		}
		a, err := dialed.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("a worker that dialed this one (it says worker %016x, pid %d on this "+
			"host, connection %08x)", w.ID(), os.Getpid(), connTag(c.id))
		if a.remote != want {
			t.Errorf("the dialed side's connection is named %q; want %q", a.remote, want)
		}
		conns = append(conns, a)
	}
	if conns[0].remote == conns[1].remote {
		t.Fatalf("the connections of two dialers have one name, %q", conns[0].remote)
	}
	var log bytes.Buffer
	dialed.mu.Lock()
	dialed.log = slog.New(slog.NewTextHandler(&log, nil))
	dialed.loseMessages(conns[0], 1) // the bound's failure of a hostile peer
	text := log.String()
	dialed.mu.Unlock()
	err = conns[0].Err()
	if !errors.Is(err, ErrProtocol) || strings.Count(err.Error(), conns[0].remote) != 1 {
		t.Errorf("the connection's error %q does not name %q once", err, conns[0].remote)
	}
	if n := strings.Count(text, conns[0].remote); n != 1 {
		t.Errorf("the log names %q %d times; want once:\n%s", conns[0].remote, n, text)
	}
}

// TestHostileHelloNotLoggedRaw: a dial's hello is the dialer's word, hostile input. One that
// names no worker address UCX would read was logged as "refused a dial", naming no dialer; it
// names the dialer now, by what its hello says, and neither such a hello (its fields' bytes
// terminal escapes and line breaks, its address overlong or of control characters) nor one
// whose address is good puts a byte of it into a log line or a connection's name as it came:
// each is printable, bounded, and names the dialer once.
func TestHostileHelloNotLoggedRaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	// The good address is w2's own: UCX reaches it by its self transport. Another worker's
	// would be reached over TCP, whose wireup reply that worker queues while TCP connects back
	// to w2 ends the process when w2 closes first (UCX 1.13; docs/ucx.md, "A peer gone while
	// it connects").
	w2 := newWorker(t)
	addr, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	forged := "\x1b[2J\nremote: a forged log line\r\x00\x07"
	g := greeting{conn: 0x0a0d1b07, worker: 0x0a1b5b33316d0d07, pid: 0x0a0a0a0a,
		host: 0x071b0a7f0d0a1b5b} // every field's bytes line breaks, escapes, BEL, DEL
	claim := fmt.Sprintf("it says worker %016x, pid %d on host id %016x", g.worker, g.pid, g.host)
	var log bytes.Buffer
	w2.mu.Lock()
	w2.log = slog.New(slog.NewJSONHandler(&log, nil)) // its messages decoded as they were
	w2.mu.Unlock()
	for i, a := range [][]byte{
		[]byte(strings.Repeat(forged, ucx.MaxAddressLen/len(forged)+1)), // overlong
		[]byte(forged),    // no address
		addr[addrHeader:], // a good one: a connection
	} {
		g.addr = a
		hello := appendGreeting(header(msgHello, 0, helloLen+len(a)), g, true)
		w2.mu.Lock()
		w2.message(ucx.Ep(0x1000+i), hello) // an endpoint of none of w2's connections
		w2.mu.Unlock()
	}
	c, err := w2.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2.mu.Lock()
	w2.failConn(c, w2.tooLarge(c, 1<<30))
	w2.mu.Unlock()
	checkName := func(what, s string) {
		t.Helper()
		if len(s) > 400 || strings.Count(s, claim) != 1 || strings.Contains(s, "forged") {
			t.Errorf("%s does not name the dialer's claim %q once, bounded: %q", what, claim, s)
		}
		for _, r := range s {
			if r < ' ' || r > '~' {
				t.Errorf("%s has %q, not printable: %q", what, r, s)
				break
			}
		}
	}
	checkName("the connection's name", c.remote)
	w2.mu.Lock()
	text := log.String()
	w2.mu.Unlock()
	var msgs []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		msgs = append(msgs, rec.Msg)
	}
	if len(msgs) != 3 { // two dials refused, one connection ended
		t.Fatalf("%d log lines; want 3:\n%s", len(msgs), text)
	}
	for i, m := range msgs {
		checkName(fmt.Sprintf("log line %d", i), m)
	}
	for _, m := range msgs[:2] {
		if !strings.HasPrefix(m, "remote: refused the dial of a worker that dialed this one") {
			t.Errorf("log line %q is not a refused dial's", m)
		}
	}
}

// TestTwoDialsOfOneWorkerNamedApart: the dialed side named a Dial's connection by its dialer's
// worker id and pid alone, so two Dials of one worker made two connections of one name, in
// logs and errors alike. Each is named by the dialer's connection id too (its word, as digits).
func TestTwoDialsOfOneWorkerNamedApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	dialed, dialer := newWorker(t), newWorker(t)
	addr, err := dialed.Address()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 2 {
		c, err := dialer.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		a, err := dialed.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("a worker that dialed this one (it says worker %016x, pid %d on this "+
			"host, connection %08x)", dialer.ID(), os.Getpid(), connTag(c.id))
		if a.remote != want {
			t.Errorf("the dialed side's connection is named %q; want %q", a.remote, want)
		}
		names = append(names, a.remote)
	}
	if names[0] == names[1] {
		t.Fatalf("two Dials of one worker made connections of one name, %q", names[0])
	}
}

// TestTwoConnectionsOfOneDialerNamedApart: the dialing side named a Dial's connection by the
// worker dialed, and a Connect's by the address, alone: two of one worker to the same peer had
// one name in its logs and errors. Each is named by its connection id too, the one the peer's
// name of it shows (dialerName), as digits.
func TestTwoConnectionsOfOneDialerNamedApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	peer, dialer := newWorker(t), newWorker(t)
	addr, err := peer.Address()
	if err != nil {
		t.Fatal(err)
	}
	l, err := peer.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dialed, connected []string
	for range 2 {
		c, err := dialer.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("worker %016x, connection %08x", peer.ID(), connTag(c.id)); c.remote != want {
			t.Errorf("a Dial's connection is named %q; want %q", c.remote, want)
		}
		dialed = append(dialed, c.remote)
		if c, err = dialer.Connect(ctx, l.Addr()); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s, connection %08x", l.Addr(), connTag(c.id)); c.remote != want {
			t.Errorf("a Connect's connection is named %q; want %q", c.remote, want)
		}
		connected = append(connected, c.remote)
	}
	if dialed[0] == dialed[1] || connected[0] == connected[1] {
		t.Fatalf("two connections of one dialer to one peer have one name: %q, %q", dialed, connected)
	}
}
