package remote

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

var segTransport = transports[2]

// TestCopyRefusesForged: over shared memory with pools of segments, a descriptor whose region
// is longer than its segment, one whose region is another process's segment, and one naming
// this process's own segment are refused before a byte is copied; the peer's buffers keep
// their bytes. A descriptor with the key of another process's segment but the peer's own
// region and range is never copied by: it goes by message, to the buffer its region and range
// name, checked by the target. Good descriptors of other peers still go by copy.
func TestCopyRefusesForged(t *testing.T) {
	needUCX(t)
	env := segTransport.set(t)
	l := newLocalFor(t, segTransport)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src := l.alloc(t, 64<<10, 5)
	mine, err := l.reg.Describe(src)
	if err != nil {
		t.Fatal(err)
	}
	other := startChild(t, l.w, env, true)
	foreign := other.alloc(64<<10, 9, 1)[0]

	foreignCRC := other.crc(0)
	for _, c := range []struct {
		name    string
		forge   func(d Descriptor) Descriptor
		message bool   // not refused: it goes by message, to the peer's buffer it names
		why     string // the refusal says
	}{
		{"a region longer than its segment", func(d Descriptor) Descriptor { d.size += 1 << 30; return d }, false, "its segment has"},
		{"another process's segment", func(d Descriptor) Descriptor {
			f := foreign
			f.worker, f.region = d.worker, d.region
			return f
		}, false, "made by process"},
		{"this process's own segment", func(d Descriptor) Descriptor {
			f := mine
			f.worker, f.region = d.worker, d.region
			return f
		}, false, "a segment of this process"},
		{"the key of another process's segment", func(d Descriptor) Descriptor { d.rkey = foreign.rkey; return d }, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := startChild(t, l.w, env, true)
			ds := ch.alloc(64<<10, 1, 1)
			crc0 := ch.crc(0)
			before := l.w.Stats().Copied
			mine0 := crcOf(src)
			err := ch.c.Put(ctx, src[:100], c.forge(ds[0]))
			if c.message {
				if err != nil {
					t.Fatalf("put by message: %v", err)
				}
				exp := make([]byte, 64<<10)
				fill(exp, 1)
				copy(exp, src[:100])
				crc0 = crcOf(exp)
			} else if !errors.Is(err, ErrDescriptor) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("put: %v, want ErrDescriptor saying %q", err, c.why)
			}
			err = ch.c.Get(ctx, src[100:200], c.forge(ds[0]))
			if c.message {
				if err != nil || string(src[100:200]) != string(src[:100]) {
					t.Fatalf("get by message: %v, or not the bytes put", err)
				}
				mine0 = crcOf(src)
			} else if !errors.Is(err, ErrDescriptor) {
				t.Errorf("get: %v, want ErrDescriptor", err)
			}
			if ch.crc(0) != crc0 || crcOf(src) != mine0 || other.crc(0) != foreignCRC {
				t.Fatal("a refused descriptor moved bytes, or bytes went elsewhere than the buffer named")
			}
			if got := l.w.Stats().Copied; got != before {
				t.Errorf("%d operations by copy with a forged descriptor", got-before)
			}
			ch.quit()
		})
	}
	// A transfer with a good descriptor and a forged one (a region the peer never had, on a
	// segment of another process) is refused at Start and moves nothing, the good one neither.
	ch := startChild(t, l.w, env, true)
	ds := ch.alloc(64<<10, 1, 1)
	crc0 := ch.crc(0)
	forged := foreign
	forged.worker, forged.region = ds[0].worker, ds[0].region+1
	tx := ch.c.NewTransfer()
	if err := errors.Join(tx.Put(src[:100], ds[0]), tx.Put(src[:100], forged)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Start(); !errors.Is(err, ErrDescriptor) {
		t.Fatalf("a batch with a forged descriptor: %v, want ErrDescriptor", err)
	}
	if ch.crc(0) != crc0 {
		t.Fatal("a refused batch moved the bytes of its good descriptor")
	}
	if err := ch.c.Put(ctx, src[:100], ds[0]); err != nil {
		t.Fatal(err) // the good descriptor alone still goes
	}
	ch.quit()

	// The other peer's good descriptor goes by copy, all along.
	before := l.w.Stats().Copied
	if err := other.c.Get(ctx, src, foreign); err != nil {
		t.Fatal(err)
	}
	check(t, "get", src, 9)
	if l.w.Stats().Copied != before+1 {
		t.Error("a good descriptor did not go by copy")
	}
	if err := l.pool.Free(src); err != nil {
		t.Fatal(err)
	}
	other.quit()
}

// TestCopyPeerKilled: once the peer's segment is mapped here, the peer killed with SIGKILL
// leaves the mapping valid (the copies never fault), and the connection then fails its
// transfers with ErrPeer; every local buffer comes back.
func TestCopyPeerKilled(t *testing.T) {
	needUCX(t)
	env := segTransport.set(t)
	l := newLocalFor(t, segTransport)
	ch := startChild(t, l.w, env, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds := ch.alloc(1<<20, 3, 1)
	b := l.alloc(t, 1<<20, 0)
	if err := ch.c.Get(ctx, b, ds[0]); err != nil {
		t.Fatal(err)
	}
	check(t, "get", b, 3)
	l.w.mu.Lock()
	e := ch.c.rkeys[ds[0].region]
	l.w.mu.Unlock()
	if e.direct != 1 {
		t.Fatal("the peer's region is not reached by copy")
	}
	ch.kill()
	// The segment stays mapped in this process: its bytes are still there to read.
	seen := mem.Bytes(e.local+uintptr(ds[0].addr-e.base), 1<<20)
	check(t, "the dead peer's segment", seen, 3)
	var err error
	for err == nil { // copies until the connection sees the death
		err = ch.c.Get(ctx, b, ds[0])
	}
	if !errors.Is(err, ErrPeer) && !errors.Is(err, ErrClosed) {
		t.Fatalf("get from the killed peer: %v, want ErrPeer", err)
	}
	if got := l.pool.Usage().Live; got != 1 {
		t.Fatalf("%d buffers live, want 1", got)
	}
	if err := l.pool.Free(b); err != nil {
		t.Fatal(err)
	}
}

// copyPair is two workers of this process over shared memory, pools of segments on both
// sides, the first connected to the second (c; peer is the second's end): puts and gets
// between them go by copy.
type copyPair struct {
	ws      [2]*Worker
	pools   [2]*pinned.Pool
	regs    [2]*Registration
	c, peer *Conn
}

func newCopyPair(b testing.TB) *copyPair {
	needUCX(b)
	b.Setenv("UCX_TLS", "sm")
	p := &copyPair{}
	b.Cleanup(func() {
		for i := range p.ws {
			if p.ws[i] != nil {
				_ = p.ws[i].Close()
			}
			if p.pools[i] != nil {
				_ = p.pools[i].Close()
			}
		}
	})
	for i := range p.ws {
		w, err := New(Options{SharedMemory: true})
		if err != nil {
			b.Fatal(err)
		}
		p.ws[i] = w
		if p.pools[i], err = testPool(w.SegmentSource(SegmentOptions{})); err != nil {
			b.Fatal(err)
		}
		if p.regs[i], err = w.Register(p.pools[i]); err != nil {
			b.Fatal(err)
		}
	}
	addr, err := p.ws[1].Address()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	accepted := make(chan *Conn, 1)
	go func() {
		c, _ := p.ws[1].Accept(ctx)
		accepted <- c
	}()
	if p.c, err = p.ws[0].Dial(ctx, addr); err != nil {
		b.Fatal(err)
	}
	if p.peer = <-accepted; p.peer == nil {
		b.Fatal("no connection accepted")
	}
	return p
}

// blocks allocates n buffers of size bytes of each side's pool, the first side's filled with
// a pattern, and returns them with the second side's descriptors.
func (p *copyPair) blocks(t testing.TB, n, size int) (src, dst [][]byte, ds []Descriptor) {
	src, dst, ds = make([][]byte, n), make([][]byte, n), make([]Descriptor, n)
	for i := range n {
		var err error
		if src[i], err = p.pools[0].Alloc(size); err != nil {
			t.Fatal(err)
		}
		if dst[i], err = p.pools[1].Alloc(size); err != nil {
			t.Fatal(err)
		}
		fill(src[i], uint64(i))
		if ds[i], err = p.regs[1].Describe(dst[i]); err != nil {
			t.Fatal(err)
		}
	}
	return src, dst, ds
}

// TestCopyOutOfLock: a batch by copy goes with the worker's mutex let go (the progress
// goroutine and other connections go on meanwhile), and what the copies use stays until they
// end: the local regions' Registration refuses to close (ErrBusy), and the peer's keys, which
// keep its segment attached here, outlive the connection (closed by the peer mid-batch) until
// the last copy; the batch lands whole and succeeds, then the keys are destroyed. The
// worker's Close waits for the copies.
func TestCopyOutOfLock(t *testing.T) {
	const n, size = 8, 256 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, close := range []string{"peer", "worker"} {
		t.Run(close, func(t *testing.T) {
			p := newCopyPair(t)
			w := p.ws[0]
			src, dst, ds := p.blocks(t, n, size)
			closed := make(chan error, 1)
			w.copyHook = func(i int) {
				if i != 0 {
					return
				}
				// The progress loop takes the mutex now and then, for a moment: held across
				// the copies, it stays held for as long as this hook runs.
				free := false
				for try := 0; try < 200 && !free; try++ {
					if free = w.mu.TryLock(); free {
						w.mu.Unlock()
					} else {
						time.Sleep(time.Millisecond / 2)
					}
				}
				if !free {
					t.Error("the worker's mutex is held across the copies")
				}
				if err := p.regs[0].Close(); !errors.Is(err, ErrBusy) {
					t.Errorf("Registration.Close during the copies: %v, want ErrBusy", err)
				}
				if close == "worker" {
					go func() { closed <- w.Close() }()
					select {
					case err := <-closed:
						t.Errorf("the worker's Close returned (%v) while its copies went on", err)
						closed <- err
					case <-time.After(50 * time.Millisecond):
					}
					return
				}
				if err := p.peer.Close(); err != nil {
					t.Error(err)
				}
				select { // this side's connection ends and is reaped meanwhile
				case <-p.c.reapedCh:
				case <-ctx.Done():
					t.Fatal("the connection closed by the peer was not reaped")
				}
				w.mu.Lock()
				keys := len(p.c.rkeys)
				w.mu.Unlock()
				if keys == 0 {
					t.Error("the connection's keys were destroyed under its copies")
				}
			}
			tx := putBatch(ctx, t, p.c, src, ds, dst, "a batch whose copies all landed")
			if close == "worker" {
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
				return
			}
			w.mu.Lock()
			keys := len(p.c.rkeys)
			w.mu.Unlock()
			if keys != 0 {
				t.Errorf("%d keys of the reaped connection left after its copies", keys)
			}
			if err := tx.Reset(); err != nil {
				t.Fatal(err)
			}
			if err := p.regs[0].Close(); err != nil {
				t.Fatalf("Registration.Close after the copies: %v", err)
			}
		})
	}
}

// timePuts times, b.N times, the Start and Wait of one Transfer of a put of each of src to the
// descriptor of dst beside it, as the bench's rows do (the Puts untimed).
func timePuts(b *testing.B, c *Conn, src [][]byte, dst []Descriptor) {
	ctx := context.Background()
	t := c.NewTransfer()
	for range b.N {
		b.StopTimer()
		for i := range src {
			if err := t.Put(src[i], dst[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := t.Start(); err != nil {
			b.Fatal(err)
		}
		if err := t.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if err := t.Reset(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCopyMixed: a transfer whose puts go partly by copy (the peer's pool of segments) and
// partly by message (its pool of ordinary memory) posts the messages once the copies, made out
// of the worker's lock, are done, and every byte lands; when the connection ends during the
// copies, the copies made stand and the messages are refused with the connection's error.
func TestCopyMixed(t *testing.T) {
	const n, size = 4, 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, closed := range []bool{false, true} {
		p := newCopyPair(t)
		src, dst, ds := p.blocks(t, n, size)
		plain, err := testPool(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		reg, err := p.ws[1].Register(plain)
		if err != nil {
			t.Fatal(err)
		}
		other := make([][]byte, n)
		tx := p.c.NewTransfer()
		for i := range n {
			if other[i], err = plain.Alloc(size); err != nil {
				t.Fatal(err)
			}
			d, err := reg.Describe(other[i])
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(tx.Put(src[i], ds[i]), tx.Put(src[i], d)); err != nil {
				t.Fatal(err)
			}
		}
		if closed {
			p.ws[0].copyHook = func(i int) {
				if i == 0 {
					if err := p.peer.Close(); err != nil {
						t.Error(err)
					}
					<-p.c.dead
				}
			}
		}
		err = tx.Start()
		if err == nil {
			err = tx.Wait(ctx)
		}
		copied := p.ws[0].Stats().Copied
		if closed {
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("the messages after the connection ended: %v, want ErrClosed", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if copied != n {
			t.Errorf("%d puts by copy, want %d", copied, n)
		}
		for i := range n {
			check(t, "put by copy", dst[i], uint64(i))
			if !closed {
				check(t, "put by message", other[i], uint64(i))
			}
		}
	}
}

// TestCopyMixedRegistrationBusy: while a transfer's copies go out of the worker's lock, the
// Registration of a local buffer of one of its operations by message (posted after the copies,
// naming the region's registration) refuses to close (ErrBusy), as it does for operations in
// flight; closed there, the messages were posted naming a registration UCX had unmapped. Once
// the transfer has ended it closes, and every byte landed.
func TestCopyMixedRegistrationBusy(t *testing.T) {
	const size = 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := newCopyPair(t)
	src, dst, ds := p.blocks(t, 1, size)
	plain, err := testPool(nil) // the peer's pool of ordinary memory: reached by message
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	reg, err := p.ws[1].Register(plain)
	if err != nil {
		t.Fatal(err)
	}
	other, err := plain.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.Describe(other)
	if err != nil {
		t.Fatal(err)
	}
	lplain, err := testPool(nil) // this side's: the message's source, in a registration of its own
	if err != nil {
		t.Fatal(err)
	}
	defer lplain.Close()
	lreg, err := p.ws[0].Register(lplain)
	if err != nil {
		t.Fatal(err)
	}
	lsrc, err := lplain.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	fill(lsrc, 7)
	tx := p.c.NewTransfer()
	if err := errors.Join(tx.Put(src[0], ds[0]), tx.Put(lsrc, d)); err != nil {
		t.Fatal(err)
	}
	p.ws[0].copyHook = func(int) {
		if err := lreg.Close(); !errors.Is(err, ErrBusy) {
			t.Errorf("Registration.Close of the message's source during the copies: %v, want ErrBusy", err)
		}
	}
	err = tx.Start()
	if err == nil {
		err = tx.Wait(ctx)
	}
	p.ws[0].copyHook = nil
	if err != nil {
		t.Fatal(err)
	}
	check(t, "put by copy", dst[0], 0)
	check(t, "put by message", other, 7)
	if err := tx.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := lreg.Close(); err != nil {
		t.Fatalf("Registration.Close after the transfer: %v", err)
	}
}

// TestCopyWakesNothing: a transfer done wholly by copy ends in Start with no system call: it
// does not wake the progress goroutine, which has nothing to do for it (200 puts by copy wake
// it no more often than its idle tick does).
func TestCopyWakesNothing(t *testing.T) {
	p := newCopyPair(t)
	src, dst, ds := p.blocks(t, 1, 4<<10)
	ctx := context.Background()
	if err := p.c.Put(ctx, src[0], ds[0]); err != nil { // maps the peer's region here
		t.Fatal(err)
	}
	w := p.ws[0]
	before, copied, start := w.Stats().Wakeups, w.Stats().Copied, time.Now()
	for range 200 {
		if err := p.c.Put(ctx, src[0], ds[0]); err != nil {
			t.Fatal(err)
		}
	}
	woke, ticks := w.Stats().Wakeups-before, uint64(time.Since(start)/idleTick)+2
	if woke > ticks {
		t.Errorf("200 puts by copy woke the progress goroutine %d times (its idle tick: %d at most)", woke, ticks)
	}
	if got := w.Stats().Copied - copied; got != 200 {
		t.Errorf("%d puts by copy, want 200", got)
	}
	check(t, "put", dst[0], 0)
}

// TestCopyPutAllocs: Conn.Put and Get reuse the transfers that ended: by copy, one allocation
// each (the transfer's channel; the pool's hold allocates nothing), not eight of a new
// transfer's slices. The race detector's sync.Pool drops a quarter of what it is given.
func TestCopyPutAllocs(t *testing.T) {
	p := newCopyPair(t)
	src, dst, ds := p.blocks(t, 1, 4<<10)
	ctx := context.Background()
	want := 1.0
	if raceEnabled {
		want = 5
	}
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"put", func() error { return p.c.Put(ctx, src[0], ds[0]) }},
		{"get", func() error { return p.c.Get(ctx, src[0], ds[0]) }},
	} {
		var err error
		n := testing.AllocsPerRun(200, func() {
			if e := op.run(); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if n > want {
			t.Errorf("%s by copy: %.1f allocations, want %.0f at most", op.name, n, want)
		}
	}
	check(t, "put", dst[0], 0)
	check(t, "get", src[0], 0)
}

// BenchmarkCopy measures puts by copy between two workers of this process over shared memory,
// pools of segments on both sides: one Transfer of 64 MiB's worth of operations of the size
// into one buffer, Start and Wait timed, as the bench's rows; memmove is the copy alone, for
// the overhead.
func BenchmarkCopy(b *testing.B) {
	p := newCopyPair(b)
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20} {
		src, err := p.pools[0].Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := p.pools[1].Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		d, err := p.regs[1].Describe(dst)
		if err != nil {
			b.Fatal(err)
		}
		n := min(16384, max(16, (64<<20)/size))
		b.Run("put/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size * n))
			timePuts(b, p.c, slices.Repeat([][]byte{src}, n), slices.Repeat([]Descriptor{d}, n))
		})
		b.Run("memmove/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size * n))
			for range b.N {
				for range n {
					copy(dst, src)
				}
			}
		})
	}
}

// BenchmarkCopyBatch measures the bench's batch by copy: 1,000 blocks of 16 KiB, each its own
// buffer on both sides (batch), against Go's copy of the same blocks (memmove), and the same
// 1,000 puts all from one buffer into one (one: ucx_perftest's way, in the cache); put is
// Conn.Put of one block.
func BenchmarkCopyBatch(b *testing.B) {
	p := newCopyPair(b)
	const n, size = 1000, 16 << 10
	src, dst, ds := p.blocks(b, n, size)
	b.Run("batch/1000x16KiB", func(b *testing.B) {
		b.SetBytes(n * size)
		timePuts(b, p.c, src, ds)
	})
	b.Run("memmove/1000x16KiB", func(b *testing.B) {
		b.SetBytes(n * size)
		for range b.N {
			for i := range src {
				copy(dst[i], src[i])
			}
		}
	})
	b.Run("one/1000x16KiB", func(b *testing.B) {
		b.SetBytes(n * size)
		timePuts(b, p.c, slices.Repeat(src[:1], n), slices.Repeat(ds[:1], n))
	})
	b.Run("put/16KiB", func(b *testing.B) { // Conn.Put: a transfer of one block, and its Wait
		b.SetBytes(size)
		for range b.N {
			if err := p.c.Put(context.Background(), src[0], ds[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// putBatch puts each src[i] to ds[i] over c in one transfer, waits for it (a failure is what's),
// checks that each dst[i], the memory ds[i] names, holds src[i]'s pattern i, and returns the
// transfer, ended.
func putBatch(ctx context.Context, t *testing.T, c *Conn, src [][]byte, ds []Descriptor, dst [][]byte, what string) *Transfer {
	t.Helper()
	tx := c.NewTransfer()
	for i := range src {
		if err := tx.Put(src[i], ds[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Wait(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for i := range dst {
		check(t, "put", dst[i], uint64(i))
	}
	return tx
}
