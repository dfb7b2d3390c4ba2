package remote

import (
	"bytes"
	"math/bits"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// The decoders of what a peer sends, fuzzed (the descriptor's and the batched acknowledgement's
// are descriptor_test.go's and acks_test.go's): each accepts exactly what its encoder writes,
// so that nothing a peer sets beyond the fields read is taken, and never panics.

// FuzzMessage: parseMessage accepts a message's header only as header writes it (any type and
// version, the reserved bytes zero), and parseGreeting a hello's or an acknowledgement's body only
// as appendGreeting writes it, with connection and worker ids not zero and a hello's address
// exactly the length it says, and parseForget a forget's body only as appendForget writes it (1
// to forgetMax region ids, none zero).
func FuzzMessage(f *testing.F) {
	g := greeting{conn: 7, worker: 9, pid: 1234, host: hostID(), addr: []byte("a worker's address")}
	f.Add(appendGreeting(header(msgHello, 0, 0), g, true))
	f.Add(appendGreeting(header(msgAck, 42, 0), greeting{conn: 7, worker: 9}, false))
	f.Add(append(header(msgData, 42, 0), "hi"...))
	f.Add(header(msgBye, 42, 0))
	f.Add(appendForget(header(msgForget, 42, 8), []uint32{3, 1 << 31}))
	f.Add(append(header(msgForget, 42, 4), 0, 0, 0, 0))
	f.Add([]byte(msgMagic))
	f.Fuzz(func(t *testing.T, m []byte) {
		typ, version, dst, body, ok := parseMessage(m)
		if !ok {
			return
		}
		again := header(typ, dst, len(body))
		again[5] = version
		if again = append(again, body...); !bytes.Equal(again, m) {
			t.Fatalf("parseMessage accepted %x, which header writes as %x", m, again)
		}
		if n, ok := parseForget(body); ok {
			ids := make([]uint32, n)
			for i := range ids {
				if ids[i] = forgetID(body, i); ids[i] == 0 {
					t.Fatalf("parseForget accepted region id 0 in %x", body)
				}
			}
			if n < 1 || n > forgetMax {
				t.Fatalf("parseForget accepted %d ids", n)
			}
			if again := appendForget(nil, ids); !bytes.Equal(again, body) {
				t.Fatalf("parseForget accepted %x, which appendForget writes as %x", body, again)
			}
		}
		for _, hello := range []bool{true, false} {
			g, ok := parseGreeting(body, hello)
			if !ok {
				continue
			}
			if g.conn == 0 || g.worker == 0 {
				t.Fatalf("parseGreeting (hello %v) accepted ids %d, %d", hello, g.conn, g.worker)
			}
			if again := appendGreeting(nil, g, hello); !bytes.Equal(again, body) {
				t.Fatalf("parseGreeting (hello %v) accepted %x, which appendGreeting writes as %x", hello, body, again)
			}
		}
	})
}

// FuzzDataHeader: decodeHeader accepts a data message's header only as encode writes it (its
// reserved bytes zero), losing nothing.
func FuzzDataHeader(f *testing.F) {
	var b [ucx.HeaderLen]byte
	dataHeader{kind: dataPut, conn: 42, op: 1<<32 | 7, addr: 1 << 40, n: 4096, region: 3, base: 1 << 40, size: 1 << 30}.encode(&b)
	f.Add(b[:])
	dataHeader{kind: dataReply, status: answerRefused, conn: 42, op: 9}.encode(&b)
	f.Add(b[:])
	f.Add(make([]byte, ucx.HeaderLen))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b [ucx.HeaderLen]byte
		copy(b[:], in)
		h, ok := decodeHeader(&b)
		if !ok {
			return
		}
		var again [ucx.HeaderLen]byte
		h.encode(&again)
		if again != b {
			t.Fatalf("decodeHeader accepted %x, which encode writes as %x", b, again)
		}
	})
}

// FuzzInRange: the target's range check (checkTarget) accepts [addr, addr+n) exactly when it
// is not empty and lies in the region, computed without wrapping around (128 bits).
func FuzzInRange(f *testing.F) {
	for _, c := range [][4]uint64{
		{1 << 40, 4096, 1 << 40, 1 << 30}, {1<<40 + 1<<30, 1, 1 << 40, 1 << 30}, {^uint64(0) - 8, 16, 1 << 40, 1 << 30},
		{1<<40 - 1, 2, 1 << 40, 1 << 30}, {1 << 40, 0, 1 << 40, 1 << 30}, {1<<40 + 1<<30 + 1, ^uint64(0), 1 << 40, 1 << 30},
	} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, addr, n, base, size uint64) {
		end, carry := bits.Add64(base, size, 0)
		if carry != 0 {
			return // no region wraps around
		}
		sum, hi := bits.Add64(addr, n, 0) // addr+n in 128 bits: hi is the carry
		want := n > 0 && addr >= base && hi == 0 && sum <= end
		if got := inRange(addr, n, base, size); got != want {
			t.Fatalf("inRange(%#x, %d, %#x, %d) = %v, want %v", addr, n, base, size, got, want)
		}
	})
}
