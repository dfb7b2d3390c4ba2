package device

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// TestFakeUsageMapBlocks: Usage agrees with Stats and allocates nothing; Map, Blocks and the
// logger see the heap's chunks and blocks. The idle purge is off: a purge between the two
// snapshots would rightly change what is committed, and AllocsPerRun counts its allocations.
func TestFakeUsageMapBlocks(t *testing.T) {
	var logbuf bytes.Buffer
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, PurgeDelay: -1, Logger: slog.New(slog.NewTextHandler(&logbuf, nil))})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	p1 := alloc(t, h, 1000, a)
	p2 := alloc(t, h, 3<<20, b)
	u := h.Usage()
	st := h.Stats()
	if u.Live != 2 || u.InUse != 1000+3<<20 || u.Committed != st.Arena.Committed || u.Reserved != st.Arena.Reserved || u.Committed == 0 {
		t.Fatalf("Usage %+v, Stats %+v", u, st)
	}
	if got, want := fmt.Sprint(u), fmt.Sprintf("2 live blocks, 3.00 MiB in use; %s committed, %s reserved", units.Bytes(u.Committed), units.Bytes(u.Reserved)); got != want {
		t.Errorf("fmt.Sprint(Usage) = %q, want %q", got, want)
	}
	if !invariants.Enabled { // the invariant checks that Collect runs allocate
		if allocs := testing.AllocsPerRun(100, func() { _ = h.Usage() }); allocs != 0 {
			t.Errorf("Usage allocates %.1f times per call", allocs)
		}
	}

	m := h.Map()
	kinds := map[heap.ChunkKind]int{}
	for _, c := range m.Chunks[0] {
		kinds[c.Kind]++
	}
	if kinds[heap.ChunkSmall] != 1 || kinds[heap.ChunkHuge] != 2 {
		t.Errorf("map kinds %v", kinds)
	}
	bs := h.Blocks()
	if len(bs) != 2 || bs[0].Addr > bs[1].Addr {
		t.Errorf("blocks %+v", bs)
	}
	seen := map[cuda.DevicePtr]uint64{}
	for _, b := range bs {
		seen[cuda.DevicePtr(b.Addr)] = b.Size
	}
	if seen[cuda.DevicePtr(p1)] != 1000 || seen[cuda.DevicePtr(p2)] != 3<<20 {
		t.Errorf("blocks %+v, want %#x (1000) and %#x (3 MiB)", bs, p1, p2)
	}
	s := h.Stats().String()
	for _, want := range []string{"device heap: device memory", "2 live", "2 streams"} {
		if !strings.Contains(s, want) {
			t.Errorf("Stats.String() lacks %q:\n%s", want, s)
		}
	}
	must(t, "Free", h.Free(cuda.DevicePtr(p1)))
	must(t, "Free", h.Free(cuda.DevicePtr(p2)))
	if u := h.Usage(); u.Live != 0 || u.InUse != 0 {
		t.Errorf("after the frees: %+v", u)
	}
	if !strings.Contains(logbuf.String(), "pinmalloc: region reserved") {
		t.Errorf("no region logged:\n%s", logbuf.String())
	}
}

// TestFakeBlocksInBatches lists more blocks than one batch of Blocks (it lets the heap's lock
// go between batches): every block is listed once, in address order, while another goroutine
// allocates and frees on another stream (run it with -race).
func TestFakeBlocksInBatches(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	const n = 5*blockBatch + 17
	want := map[cuda.DevicePtr]uint64{}
	for i := range n {
		size := uintptr(256 + i%3*256)
		want[cuda.DevicePtr(alloc(t, h, size, a))] = uint64(size)
	}
	stop, errs := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			p, err := h.Alloc(4096, cuda.Stream(b))
			if err == nil {
				err = h.FreeAsync(p, cuda.Stream(b))
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 3 {
		bs := h.Blocks()
		got := 0
		for i, bl := range bs {
			if size, ok := want[cuda.DevicePtr(bl.Addr)]; ok {
				got++
				if bl.Size != size {
					t.Errorf("block %#x: %d bytes, want %d", bl.Addr, bl.Size, size)
				}
			}
			if i > 0 && bl.Addr <= bs[i-1].Addr {
				t.Fatalf("blocks %d and %d out of order: %#x, %#x", i-1, i, bs[i-1].Addr, bl.Addr)
			}
		}
		if got != n || len(bs) > n+1 {
			t.Fatalf("Blocks listed %d of the %d blocks (and %d others; the other goroutine holds at most 1)", got, n, len(bs)-got)
		}
	}
	close(stop)
	must(t, "allocating goroutine", <-errs)
	for p := range want {
		must(t, "Free", h.Free(p))
	}
}
