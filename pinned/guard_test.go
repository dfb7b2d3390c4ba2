package pinned

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

func TestZeroOnFree(t *testing.T) {
	p := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable, ZeroOnFree: true, PurgeDelay: -1})
	for _, n := range []int{100, 5000, 300 << 10, 3 << 20} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] = 0xAB
		}
		if err := p.Free(b[: n-1 : n-1]); !errors.Is(err, ErrSubSlice) {
			t.Fatalf("Free of a sub-slice: %v", err)
		}
		if err := p.Free(b[1:]); !errors.Is(err, ErrSubSlice) {
			t.Fatalf("Free of an offset sub-slice: %v", err)
		}
		if b[0] != 0xAB || b[n-1] != 0xAB {
			t.Fatal("a refused Free cleared the buffer")
		}
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
		// The memory stays mapped (no purge): what a later user would be handed reads zero.
		if !bytes.Equal(b, make([]byte, n)) {
			t.Fatalf("a freed buffer of %d bytes still holds its data", n)
		}
	}
	goSlice := bytes.Repeat([]byte{7}, 64)
	if err := p.Free(goSlice); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Free of Go memory: %v", err)
	}
	if goSlice[0] != 7 {
		t.Fatal("a refused Free cleared memory the pool does not own")
	}
}

func TestQuota(t *testing.T) {
	if _, err := New(Options{Backend: Pageable, Capacity: 64 << 20, Quota: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("negative quota: %v", err)
	}
	p := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable, Quota: 10000})
	a, err := p.Alloc(6000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Alloc(6000); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc past the quota: %v", err)
	}
	b, err := p.Alloc(4000) // exactly the quota
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Alloc(1); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc at the quota: %v", err)
	}
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(a); !errors.Is(err, ErrDoubleFree) { // a refused free gives no bytes back
		t.Fatalf("double free: %v", err)
	}
	c, err := p.Alloc(6000)
	if err != nil {
		t.Fatalf("Alloc after a free under the quota: %v", err)
	}
	if _, err := p.Alloc(1); !errors.Is(err, ErrQuota) {
		t.Fatalf("the refused double free gave bytes back: %v", err)
	}
	for _, x := range [][]byte{b, c} {
		if err := p.Free(x); err != nil {
			t.Fatal(err)
		}
	}

	// Concurrent Allocs never take the live bytes past the quota; each goroutine alone holds
	// enough (41 buffers of 30 KB on average) to reach it.
	const quota = 1 << 20
	q := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable, Quota: quota})
	var live, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held [][]byte
			for i := range 2000 {
				n := 1000 + (w*7919+i*104729)%60000
				b, err := q.Alloc(n)
				if err != nil {
					if !errors.Is(err, ErrQuota) {
						t.Error(err)
						return
					}
				} else {
					v := live.Add(int64(n))
					for old := peak.Load(); v > old && !peak.CompareAndSwap(old, v); old = peak.Load() {
					}
					held = append(held, b)
				}
				if len(held) > 40 || (err != nil && len(held) > 0) {
					live.Add(-int64(len(held[0])))
					if err := q.Free(held[0]); err != nil {
						t.Error(err)
						return
					}
					held = held[1:]
				}
			}
			for _, b := range held {
				live.Add(-int64(len(b)))
				if err := q.Free(b); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() > quota || peak.Load() < quota/2 {
		t.Fatalf("peak live bytes %d with a quota of %d", peak.Load(), quota)
	}
}

// BenchmarkGuards measures an alloc+free pair with the guards off, with ZeroOnFree, and with
// a quota, side by side in one run.
func BenchmarkGuards(b *testing.B) {
	for _, n := range []int{64, 4096, 64 << 10} {
		for _, g := range []struct {
			name string
			o    Options
		}{
			{"off", Options{}},
			{"zero", Options{ZeroOnFree: true}},
			{"quota", Options{Quota: 1 << 30}},
			{"both", Options{ZeroOnFree: true, Quota: 1 << 30}},
		} {
			b.Run(fmt.Sprintf("%d/%s", n, g.name), func(b *testing.B) {
				g.o.Capacity, g.o.Backend = 256<<20, Pageable
				p := newTestPool(b, g.o)
				for b.Loop() {
					buf, err := p.Alloc(n)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Free(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestFreeResliced: a buffer resliced from its start (buf = buf[:nread]) is freed whole, by
// Free and under the guards; slices that start elsewhere or cut the capacity are not. Free of
// a resliced buffer used to be refused as a sub-slice (issue 27).
func TestFreeResliced(t *testing.T) {
	for _, o := range []Options{{}, {ZeroOnFree: true, Quota: 1 << 20}} {
		o.Capacity, o.Backend, o.PurgeDelay = 64<<20, Pageable, -1
		p := newTestPool(t, o)
		for _, n := range []int{100, 5000, 300 << 10} {
			b, err := p.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range b {
				b[i] = 0xCD
			}
			if err := p.Free(b[1:1]); !errors.Is(err, ErrSubSlice) {
				t.Fatalf("Free of an empty slice one byte in: %v", err)
			}
			if err := p.Free(b[:n/2]); err != nil {
				t.Fatalf("Free of a buffer resliced to half its length: %v", err)
			}
			if err := p.Free(b); !errors.Is(err, ErrDoubleFree) {
				t.Fatalf("Free of the whole buffer after a free of its reslice: %v", err)
			}
			if o.ZeroOnFree && (b[0] != 0 || b[n-1] != 0) {
				t.Fatal("ZeroOnFree of a resliced buffer left its tail")
			}
			c, err := p.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Free(c[:0]); err != nil {
				t.Fatalf("Free of a buffer resliced to nothing: %v", err)
			}
		}
		if u := p.Usage(); u.Live != 0 {
			t.Fatalf("after the frees: %+v", u)
		}
	}
}

// TestZeroOnFreeClearsExtent: with ZeroOnFree, a Free clears the buffer's whole extent
// (heap.Group.Extent), past its length: a device's work reaching the buffer through
// DevicePointer, or a copy into it, may write there (the memory is the block's, committed:
// nothing faults), and the block's next owner, who may ask for more, would read it. Before, the
// scrub cleared the buffer's length alone. The extent stays in proportion to the buffer.
// The test writes the extent with the CPU, as the device would.
func TestZeroOnFreeClearsExtent(t *testing.T) {
	// One shard: every P's buffers come from one heap, which keeps the huge one for the next.
	p := newTestPool(t, Options{Capacity: 256 << 20, Backend: Pageable, ZeroOnFree: true, PurgeDelay: -1, Shards: 1})
	var last uintptr
	for _, c := range []struct {
		what string
		n    int
		most uintptr // the extent's bound: in proportion to the buffer
		kept bool    // the last one's memory, kept for reuse
	}{
		{"a size class's block", 4000, 4096, false},
		{"an object page", 300<<10 + 1, 320 << 10, false},
		{"a huge object", 3<<20 + 100, 3<<20 + 4096, false},
		{"a kept huge object, reused", 3<<20 + 50, 3<<20 + 4096, true},
	} {
		b, err := p.Alloc(c.n)
		if err != nil {
			t.Fatal(err)
		}
		addr := mem.Addr(b)
		if c.kept && addr != last {
			t.Fatalf("%s: the last buffer's memory was not reused (%#x, then %#x)", c.what, last, addr)
		}
		last = addr
		ext, err := p.g.Extent(addr)
		if err != nil {
			t.Fatal(err)
		}
		if ext <= uintptr(c.n) || ext > c.most {
			t.Fatalf("%s: a buffer of %d bytes has an extent of %d; want more (else the test proves nothing), at most %d", c.what, c.n, ext, c.most)
		}
		all := mem.Bytes(addr, ext)
		for i := range all {
			all[i] = 0x5A
		}
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
		// The memory stays mapped (no purge): what a later user would be handed reads zero.
		for i, v := range all {
			if v != 0 {
				t.Errorf("%s: a freed buffer of %d bytes holds %#x at byte %d of its extent of %d", c.what, c.n, v, i, ext)
				break
			}
		}
	}
}
