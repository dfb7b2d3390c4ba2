package device

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

func TestFakeUsageMapBlocks(t *testing.T) {
	var logbuf bytes.Buffer
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, Logger: slog.New(slog.NewTextHandler(&logbuf, nil))})
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
	if allocs := testing.AllocsPerRun(100, func() { _ = h.Usage() }); allocs != 0 {
		t.Errorf("Usage allocates %.1f times per call", allocs)
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
		seen[b.Addr] = b.Size
	}
	if seen[p1] != 1000 || seen[p2] != 3<<20 {
		t.Errorf("blocks %+v, want %#x (1000) and %#x (3 MiB)", bs, p1, p2)
	}
	s := h.Stats().String()
	for _, want := range []string{"device heap: device memory", "2 live", "2 streams"} {
		if !strings.Contains(s, want) {
			t.Errorf("Stats.String() lacks %q:\n%s", want, s)
		}
	}
	must(t, "Free", h.Free(p1))
	must(t, "Free", h.Free(p2))
	if u := h.Usage(); u.Live != 0 || u.InUse != 0 {
		t.Errorf("after the frees: %+v", u)
	}
	if !strings.Contains(logbuf.String(), "pinmalloc: region reserved") {
		t.Errorf("no region logged:\n%s", logbuf.String())
	}
}
