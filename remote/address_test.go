package remote

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestForgedWorkerAddress: a worker address reaches ucp_ep_create, which reads it with no
// length, trusting every count in it, and aborts the process (ucs_assertv_always) on an address
// version other than 1 or 2. A forged or truncated address, given to Dial or carried by a peer's
// hello, is refused before UCX sees it: Dial with ErrDescriptor, a hello by making no
// connection. Before, the forged version ended this process (SIGABRT in ucp_address_unpack).
func TestForgedWorkerAddress(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2 := newWorker(t), newWorker(t)
	a, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	version := bytes.Clone(a)
	version[addrHeader] = version[addrHeader]&0xf0 | 2 // UCX's address version 3
	forged := map[string][]byte{
		"version 3":            version,
		"truncated":            a[:len(a)-1],
		"a byte after its end": append(bytes.Clone(a), 0),
	}
	for what, f := range forged {
		if _, err := w1.Dial(ctx, f); !errors.Is(err, ErrDescriptor) {
			t.Fatalf("Dial of an address %s: %v, want ErrDescriptor", what, err)
		}
		g := greeting{conn: 1, worker: 2, pid: uint32(os.Getpid()), host: hostID(), addr: f[addrHeader:]}
		hello := appendGreeting(header(msgHello, 0, helloLen+len(g.addr)), g, true)
		w2.mu.Lock()
		before := len(w2.conns)
		w2.message(dialerEp, hello)
		after := len(w2.conns)
		w2.mu.Unlock()
		if after != before {
			t.Fatalf("a hello carrying an address %s made a connection", what)
		}
	}
	c, err := w1.Dial(ctx, a)
	if err != nil {
		t.Fatalf("Dial of the honest address after the forged ones: %v", err)
	}
	if _, err := w2.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// dialerEp stands for the endpoint a dialer's hello comes on: one UCX made for the dialer, not
// one of the worker's (a hello on none, or on a connection's, is dropped before its address is
// read). Only a hello whose address is refused may name it: it is never used.
const dialerEp = ucx.Ep(1)

// TestDialRefusesReservedBytes: the three bytes after a worker address's version are reserved
// (zero, as Address writes them); Dial refuses an address with any of them set, with
// ErrDescriptor naming them, as ParseDescriptor refuses a descriptor's reserved field. Before,
// Dial ignored them and connected.
func TestDialRefusesReservedBytes(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2 := newWorker(t), newWorker(t)
	a, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 8; i++ {
		f := bytes.Clone(a)
		f[i] = 1
		c, err := w1.Dial(ctx, f)
		if !errors.Is(err, ErrDescriptor) {
			if c != nil {
				_ = c.Close()
			}
			t.Fatalf("Dial of an address with reserved byte %d set: %v, want ErrDescriptor", i, err)
		}
	}
}
