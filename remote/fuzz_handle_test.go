package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// FuzzHandle: what a peer sends, as the progress goroutine hands it to the worker (a message
// of the protocol, a data message's header and length, a message UCX's callback dropped), is
// handled without a panic whatever its bytes, for the peer's own connection or any id; a
// connection it ends ends with ErrProtocol or ErrClosed (a bye). The flags aim the bytes at
// the live state: bit 0 a data message (else a protocol message), bit 1 the connection's real
// id, bit 2 a real region of the target's (its id, base and size), bit 3 a live buffer of it
// (the address), bit 4 a message dropped by the callback (Event.Dropped, else Oversize, with
// bit 0 clear and bit 5 set), bit 6 a message on a dialer's endpoint (dialerEp: a hello's
// address is read).
func FuzzHandle(f *testing.F) {
	f.Add(header(msgData, 0, 0), []byte{}, uint32(0), uint8(2))
	f.Add(appendForget(header(msgForget, 0, 8), []uint32{3, 1}), []byte{}, uint32(0), uint8(2))
	f.Add(appendGreeting(header(msgAck, 0, ackLen), greeting{conn: 7, worker: 9}, false), []byte{}, uint32(0), uint8(2))
	f.Add(header(msgBye, 0, 0), []byte{}, uint32(0), uint8(2))
	var h [ucx.HeaderLen]byte
	for _, kind := range []uint8{dataPut, dataGet, dataReply, dataDone} {
		dataHeader{kind: kind, op: 1<<32 | 3, n: 64}.encode(&h)
		f.Add([]byte{}, append([]byte(nil), h[:]...), uint32(64), uint8(1|2|4|8))
	}
	encodeDones(&h, 0, []uint64{1<<32 | 3, 2<<32 | 5})
	f.Add([]byte{}, append([]byte(nil), h[:]...), uint32(0), uint8(1|2))
	f.Add(header(msgData, 0, 0), []byte{}, uint32(1<<30), uint8(2|16|32))
	g := greeting{conn: 7, worker: 9, pid: 1234, host: hostID(), addr: []byte("a worker's address")}
	f.Add(appendGreeting(header(msgHello, 0, 0), g, true), []byte{}, uint32(0), uint8(64))
	var p *fuzzPair
	f.Cleanup(func() { p.close() })
	f.Fuzz(func(t *testing.T, m, hdr []byte, n uint32, flags uint8) {
		if p == nil || p.failed() {
			p.close()
			var err error
			if p, err = newFuzzPair(t); err != nil {
				t.Fatal(err)
			}
		}
		w, c := p.w2, p.c2
		w.mu.Lock()
		switch {
		case flags&1 != 0:
			ev := ucx.Event{Kind: ucx.EventData, Len: int(n % (1 << 20))}
			copy(ev.Header[:], hdr)
			if flags&2 != 0 {
				binary.LittleEndian.PutUint64(ev.Header[8:], c.id)
			}
			if flags&4 != 0 {
				binary.LittleEndian.PutUint32(ev.Header[40:], p.lr.id)
				binary.LittleEndian.PutUint64(ev.Header[48:], uint64(p.lr.base))
				binary.LittleEndian.PutUint64(ev.Header[56:], uint64(p.lr.size))
			}
			if flags&8 != 0 {
				binary.LittleEndian.PutUint64(ev.Header[24:], uint64(mem.Addr(p.buf)))
			}
			w.handle(&ev)
		default:
			m = append([]byte(nil), m...)
			if flags&2 != 0 && len(m) >= msgHeader {
				binary.LittleEndian.PutUint64(m[8:], c.id)
			}
			ev := ucx.Event{Kind: ucx.EventMessage, Data: m}
			if flags&64 != 0 {
				ev.Handle = uintptr(dialerEp)
			}
			if flags&32 != 0 {
				ev.Data, ev.Len = m[:min(len(m), ucx.PeekLen)], int(n)
				ev.Dropped, ev.Oversize = flags&16 != 0, flags&16 == 0
			}
			w.handle(&ev)
		}
		w.signal()
		err := c.err
		w.mu.Unlock()
		if err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrClosed) {
			t.Fatalf("the connection ended with %v: neither ErrProtocol nor ErrClosed", err)
		}
	})
}

// fuzzPair is connectedPair's, kept across FuzzHandle's inputs (made anew once one ends the
// connection): a target w2 with a region lr and a live buffer buf of it, and the connection c2
// the inputs come on.
type fuzzPair struct {
	w1, w2 *Worker
	pool   *pinned.Pool
	c2     *Conn
	lr     *localRegion
	buf    []byte
}

func newFuzzPair(t *testing.T) (*fuzzPair, error) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &fuzzPair{}
	var err error
	if p.w1, err = New(Options{}); err != nil {
		return nil, err
	}
	if p.w2, err = New(Options{}); err != nil {
		p.close()
		return nil, err
	}
	fail := func(err error) (*fuzzPair, error) { p.close(); return nil, err }
	if p.pool, err = testPool(nil); err != nil {
		return fail(err)
	}
	if _, err = p.w2.Register(p.pool); err != nil {
		return fail(err)
	}
	if p.buf, err = p.pool.Alloc(256); err != nil {
		return fail(err)
	}
	if p.lr, err = p.w2.regionOf(p.buf); err != nil {
		return fail(err)
	}
	l, err := p.w2.Listen("127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	if _, err = p.w1.Connect(ctx, l.Addr()); err != nil {
		return fail(err)
	}
	if p.c2, err = l.Accept(ctx); err != nil {
		return fail(err)
	}
	return p, nil
}

// failed reports whether the pair's connection has ended.
func (p *fuzzPair) failed() bool { return p.c2.Err() != nil }

func (p *fuzzPair) close() {
	if p == nil {
		return
	}
	for _, w := range []*Worker{p.w1, p.w2} {
		if w != nil {
			_ = w.Close()
		}
	}
	if p.pool != nil {
		_ = p.pool.Close()
	}
}
