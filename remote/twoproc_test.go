package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestTwoProcesses moves buffers of every kind of block (4 KiB to a 3 MiB huge object) between
// this process and another over each transport, both ways, in batches and singly, a part of a
// buffer too, and checks every byte: what this process gets byte for byte, what it puts by the
// CRC-64 of every one of the other process's buffers (so a write outside the buffer named, into
// another buffer, shows too).
func TestTwoProcesses(t *testing.T) {
	needUCX(t)
	for i, tr := range transports {
		for _, mode := range []Mode{ModeAuto, ModeRMA} {
			name := tr.name
			if mode == ModeRMA {
				name += "/rma"
			}
			t.Run(name, func(t *testing.T) { twoProcesses(t, tr, i%2 == 1 || tr.shm, mode) })
		}
	}
}

func twoProcesses(t *testing.T, tr transport, dial bool, mode Mode) {
	env := tr.set(t)
	l := newLocalMode(t, tr, mode)
	maps := ucx.MemMaps()
	ch := startChild(t, l.w, env, dial) // tcp by its listener, shm by its address
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The child's buffers, two of each size, and as many of this process's.
	var ds []Descriptor
	var want []uint64 // the CRC-64 each of the child's buffers must have
	var mine [][]byte
	for j, n := range procSizes {
		seed := uint64(100 + 10*j)
		ds = append(ds, ch.alloc(n, seed, 2)...)
		for k := range 2 {
			b := make([]byte, n)
			fill(b, seed+uint64(k))
			want = append(want, crcOf(b))
			mine = append(mine, l.alloc(t, n, 0))
		}
	}
	// One batch of gets.
	l.w.mu.Lock()
	landed0, byMessage := l.w.uw.Landed(), !l.w.rmaMode(ch.c) && !tr.seg
	l.w.mu.Unlock()
	tx := ch.c.NewTransfer()
	for k := range ds {
		if err := tx.Get(mine[k], ds[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	l.w.mu.Lock()
	if ch.c.gets > getWindow {
		t.Errorf("%d gets by message in flight, more than the window of %d", ch.c.gets, getWindow)
	}
	l.w.mu.Unlock()
	if err := tx.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	l.w.mu.Lock()
	if ch.c.gets != 0 {
		t.Errorf("%d gets by message in flight once the transfer ended", ch.c.gets)
	}
	l.w.mu.Unlock()
	for k, b := range mine {
		check(t, "get", b, uint64(100+10*(k/2)+k%2))
	}
	// By message, a get goes as requests of getPart bytes at most, and every answer is copied
	// by UCX's callback straight into place: none is queued and copied again.
	if byMessage {
		want := uint64(0)
		for _, b := range mine {
			want += uint64((len(b) + getPart - 1) / getPart)
		}
		l.w.mu.Lock()
		got := l.w.uw.Landed() - landed0
		l.w.mu.Unlock()
		if got != want {
			t.Errorf("%d answers to gets landed in place, want %d (one per request of at most %d bytes)", got, want, getPart)
		}
	}
	// One batch of puts of new bytes, on the same transfer, reset.
	if err := tx.Reset(); err != nil {
		t.Fatal(err)
	}
	for k, b := range mine {
		fill(b, uint64(500+k))
		want[k] = crcOf(b)
		if err := tx.Put(b, ds[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tx.Done():
	case <-ctx.Done():
		t.Fatal("put batch: timed out")
	}
	if err := tx.Err(); err != nil {
		t.Fatal(err)
	}
	// A single put of 100 bytes into the middle of buffer 8 (256 KiB).
	part, err := ds[6].Slice(1000, 100)
	if err != nil {
		t.Fatal(err)
	}
	src := mine[0][:100]
	if err := ch.c.Put(ctx, src, part); err != nil {
		t.Fatal(err)
	}
	exp := make([]byte, ds[6].Len())
	fill(exp, 506)
	copy(exp[1000:], src)
	want[6] = crcOf(exp)
	// A single get back of the same part.
	back := l.alloc(t, 100, 0)
	if err := ch.c.Get(ctx, back, part); err != nil {
		t.Fatal(err)
	}
	if string(back) != string(src) {
		t.Fatal("get of a part: bytes differ")
	}
	for k := range ds {
		if got := ch.crc(k); got != want[k] {
			t.Fatalf("child's buffer %d (%d bytes): CRC %x, want %x", k, ds[k].Len(), got, want[k])
		}
	}
	// Registration: one ucp_mem_map per region, never one per buffer.
	if got, regions := ucx.MemMaps()-maps, int64(l.reg.Regions()); got != regions || regions == 0 {
		t.Errorf("%d ucp_mem_map calls for %d buffers; the pool has %d regions registered", got, len(mine)+1, regions)
	}
	st := l.w.Stats()
	if st.Failed != 0 || st.Ops < uint64(2*len(ds)+2) {
		t.Errorf("stats %+v", st)
	}
	if copied := uint64(2*len(ds) + 2); tr.seg && st.Copied != copied || !tr.seg && st.Copied != 0 {
		t.Errorf("%d operations by copy, want %d (segments: %v)", st.Copied, copied, tr.seg)
	}
	for _, b := range append(mine, back) {
		if err := l.pool.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	ch.quit()
}

// TestBadDescriptors: every descriptor a connection must not use is refused, with the error
// that says why, and nothing is written: the other process's buffers keep their bytes.
func TestBadDescriptors(t *testing.T) {
	needUCX(t)
	env := transports[0].set(t)
	l := newLocal(t)
	ch := startChild(t, l.w, env, false)
	other := startChild(t, l.w, env, true) // a second peer, whose descriptors are not ch's
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds := ch.alloc(64<<10, 1, 2)
	foreign := other.alloc(64<<10, 9, 1)[0]
	crc0 := ch.crc(0)
	src := l.alloc(t, 128<<10, 5)
	goMem := make([]byte, 100)

	refused := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	put := func(b []byte, d Descriptor) error { return ch.c.Put(ctx, b, d) }
	refused("a descriptor of another worker", put(src[:100], foreign), ErrDescriptor)
	refused("the zero descriptor", put(src[:100], Descriptor{}), ErrDescriptor)
	refused("more bytes than the buffer", put(src, ds[0]), ErrOutOfRange)
	refused("get of more bytes than the buffer", ch.c.Get(ctx, src, ds[0]), ErrOutOfRange)
	_, err := ds[0].Slice(64<<10-10, 11)
	refused("a slice past the end", err, ErrOutOfRange)
	_, err = ds[0].Slice(-1, 10)
	refused("a slice before the start", err, ErrOutOfRange)
	refused("Go memory, not a pool's", put(goMem, ds[0]), ErrNotRegistered)

	// A descriptor that contradicts what the connection learned of its region: another range,
	// another key. Use a good one first, so the connection knows the region.
	if err := put(src[:10], ds[1]); err != nil {
		t.Fatal(err)
	}
	crc1 := ch.crc(1)
	moved := ds[0]
	moved.base -= 4096
	moved.size += 4096
	refused("a region moved", put(src[:10], moved), ErrDescriptor)
	rekeyed := ds[0]
	rekeyed.rkey = strings.Repeat("x", len(rekeyed.rkey))
	refused("a region with another key", put(src[:10], rekeyed), ErrDescriptor)
	// A region the peer never registered, which the connection cannot know of: by message, the
	// peer refuses it (with UCX's puts, the write would land where the descriptor says).
	l.w.mu.Lock()
	messages := !l.w.rmaMode(ch.c)
	l.w.mu.Unlock()
	if messages {
		unknown := ds[0]
		unknown.region += 1000
		refused("a region the peer does not have", put(src[:10], unknown), ErrDescriptor)
		shifted := ds[1]
		shifted.region += 2000
		shifted.base += 4096 // a range of its own, still holding the buffer
		shifted.size -= 4096
		refused("a region the peer has with another range", put(src[:10], shifted), ErrDescriptor)
	}

	// Bytes: every truncation, a flipped bit anywhere, a buffer outside its region.
	b, _ := ds[0].MarshalBinary()
	for n := range len(b) {
		if _, _, err := ParseDescriptor(b[:n]); !errors.Is(err, ErrDescriptor) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	for i := range len(b) {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, _, err := ParseDescriptor(c); !errors.Is(err, ErrDescriptor) {
			t.Fatalf("bit flipped in byte %d: %v", i, err)
		}
	}
	outside := ds[0]
	outside.addr = outside.base + outside.size - 10
	ob, _ := outside.MarshalBinary()
	_, _, err = ParseDescriptor(ob)
	refused("a buffer past its region's end", err, ErrDescriptor)

	// Nothing was written by any of them.
	if ch.crc(0) != crc0 || ch.crc(1) != crc1 {
		t.Fatal("a refused descriptor wrote into the peer's buffers")
	}
	// A closed connection, a closed registration.
	if err := other.c.Close(); err != nil {
		t.Fatal(err)
	}
	refused("a message on a closed connection", other.c.Send(ctx, []byte("x")), ErrClosed)
	refused("a put on a closed connection", other.c.Put(ctx, src[:10], foreign), ErrClosed)
	if err := l.reg.Close(); err != nil {
		t.Fatal(err)
	}
	refused("after the registration's Close", put(src[:10], ds[0]), ErrNotRegistered)
	if err := l.pool.Free(src); err != nil {
		t.Fatal(err)
	}
	ch.quit()
}
