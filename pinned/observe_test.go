package pinned

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestUsage: Usage agrees with Stats, counts a remote free at once, and allocates nothing. The
// pool's purge is off: a purge between the two snapshots rightly changes what is committed, and
// AllocsPerRun counts the purger's allocations too (the probe build's purge delay of 1 us showed
// both).
func TestUsage(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 64 << 20, PurgeDelay: -1})
	var bufs [][]byte
	var want uint64
	for _, n := range []int{1, 100, 5000, 70 << 10, 600 << 10, 3 << 20} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		want += uint64(n)
	}
	u := p.Usage()
	st := p.Stats()
	if u.Live != 6 || u.InUse != want || u.Committed != st.Committed || u.Reserved != st.Reserved || u.Locked != 0 {
		t.Fatalf("Usage %+v, want 6 live, %d in use, committed %d, reserved %d", u, want, st.Committed, st.Reserved)
	}
	// A free from another goroutine is counted at once (Usage collects).
	done := make(chan error)
	go func() { done <- p.Free(bufs[0]) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Live != 5 || u.InUse != want-1 {
		t.Fatalf("after a remote free: %+v", u)
	}
	// Under -tags invariants the heap's invariant checks build maps and slices of their own,
	// which allocate: the assertion is about the release build's Usage.
	if allocs := testing.AllocsPerRun(100, func() { _ = p.Usage() }); allocs != 0 && !invariants.Enabled {
		t.Fatalf("Usage allocates %.1f times per call", allocs)
	}
	for _, b := range bufs[1:] {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if u := p.Usage(); u.Live != 0 || u.InUse != 0 {
		t.Fatalf("after freeing all: %+v", u)
	}
}

func TestStatsString(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 64 << 20})
	b, err := p.Alloc(3000)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free(b)
	s := p.Stats().String()
	for _, want := range []string{"backend pageable", "1 live, 2.93 KiB in use", "1 allocs, 0 frees", "class     3 KiB: 1 live", "reserved of 64 MiB capacity"} {
		if !strings.Contains(s, want) {
			t.Errorf("Stats.String() lacks %q:\n%s", want, s)
		}
	}
}

func TestMapAndBlocks(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 256 << 20, PurgeDelay: time.Hour})
	small, _ := p.Alloc(100)
	med, _ := p.Alloc(20 << 10)
	obj, _ := p.Alloc(500 << 10)
	huge, err := p.Alloc(5 << 20)
	if err != nil || small == nil || med == nil || obj == nil {
		t.Fatal("alloc failed", err)
	}
	gone, _ := p.Alloc(7 << 20)
	if err := p.Free(gone); err != nil { // freed huge: its chunks wait for the purge
		t.Fatal(err)
	}
	m := p.Map()
	if len(m.Arena.Regions) != 1 || len(m.Chunks) != 1 {
		t.Fatalf("map has %d regions", len(m.Arena.Regions))
	}
	kinds := map[heap.ChunkKind]int{}
	var live int
	var hugeSize uint64
	for i, c := range m.Chunks[0] {
		kinds[c.Kind]++
		for _, pg := range c.Pages {
			live += pg.Live
		}
		if c.HugeFirst && c.HugeSize > 0 {
			hugeSize = c.HugeSize
			live++
		}
		if c.Kind != heap.ChunkFree && !m.Arena.Regions[0].Chunks[i].InUse {
			t.Errorf("chunk %d holds a %s segment but the arena has it free", i, c.Kind)
		}
	}
	if kinds[heap.ChunkSmall] != 1 || kinds[heap.ChunkMedium] != 1 || kinds[heap.ChunkObject] != 1 || hugeSize != 5<<20 || live != 4 {
		t.Fatalf("kinds %v, huge %d, live %d", kinds, hugeSize, live)
	}
	// The freed huge object is kept by its heap for reuse: committed, idle, given up by the
	// purge timer if it stays so.
	kept := 0
	for i, c := range m.Arena.Regions[0].Chunks {
		if ci := m.Chunks[0][i]; ci.Kind == heap.ChunkHuge && ci.HugeSize == 0 && c.Committed > 0 && c.Kept == c.Committed {
			kept++
		}
	}
	if kept != 4 {
		t.Errorf("%d chunks of a kept huge object are idle kept memory, want 4", kept)
	}
	if run, _ := m.Arena.LargestFreeRun(); run < 8<<20 {
		t.Errorf("largest free run %d", run)
	}

	bs := p.Blocks()
	got := map[uintptr]Block{}
	for _, b := range bs {
		got[b.Addr] = b
	}
	for _, c := range []struct {
		b    []byte
		kind string
	}{{small, "small"}, {med, "medium"}, {obj, "object"}, {huge, "huge"}} {
		b, ok := got[mem.Addr(c.b)]
		if !ok || b.Size != len(c.b) || b.Kind != c.kind || b.BlockSize < b.Size || b.Site != nil {
			t.Errorf("block of %d bytes: %+v (found %v)", len(c.b), b, ok)
		}
	}
	if len(bs) != 4 {
		t.Errorf("%d blocks listed, want 4", len(bs))
	}
	for _, b := range [][]byte{small, med, obj, huge} {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if bs := p.Blocks(); len(bs) != 0 {
		t.Errorf("blocks after freeing all: %+v", bs)
	}
}

//go:noinline
func leakySite(p *Pool, n int) ([]byte, error) { return p.Alloc(n) }

func TestRecordSites(t *testing.T) {
	p, err := New(Options{Backend: Pageable, Capacity: 64 << 20, RecordSites: true})
	if err != nil {
		t.Fatal(err)
	}
	var leaks [][]byte
	for i := 0; i < 3; i++ {
		b, err := leakySite(p, 4096)
		if err != nil {
			t.Fatal(err)
		}
		leaks = append(leaks, b)
	}
	other, _ := p.Alloc(64)
	time.Sleep(2 * time.Millisecond)
	var found int
	for _, b := range p.Blocks() {
		if len(b.Site) == 0 || b.Age < time.Millisecond {
			t.Errorf("block %+v has no site or age", b)
			continue
		}
		if strings.Contains(b.Site[0], "pinned.leakySite") {
			found++
		}
	}
	if found != 3 {
		t.Errorf("%d blocks name leakySite as their site, want 3", found)
	}
	if err := p.Free(other); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(other); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	err = p.Close()
	if !errors.Is(err, ErrLiveBlocks) || !strings.Contains(err.Error(), "3 buffers (12288 bytes) at github.com/pinmalloc/pinmalloc/pinned.leakySite") {
		t.Fatalf("Close with leaks: %v", err)
	}
	for _, b := range leaks {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 64 << 20, Logger: log, PurgeDelay: -1})
	b, err := p.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	p.Trim()
	out := buf.String()
	for _, want := range []string{"pinmalloc: region reserved", "size=67108864", "pinmalloc: trim", "decommitted=4194304"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	// Silent by default: a pool without a logger writes nothing to the default logger.
	var def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(old)
	q := newTestPool(t, Options{Backend: Pageable, Capacity: 64 << 20})
	c, _ := q.Alloc(4 << 20)
	_ = q.Free(c)
	q.Trim()
	if def.Len() != 0 {
		t.Errorf("a pool without a logger logged: %s", def.String())
	}
}

// TestObserveConcurrent reads Map, Blocks and Usage while goroutines allocate and free (run it
// with -race): every picture is consistent (a chunk a heap holds is in use in the arena, no
// page has more live blocks than blocks).
func TestObserveConcurrent(t *testing.T) {
	t.Run("plain", func(t *testing.T) { observeConcurrent(t, Options{}) })
	t.Run("sites", func(t *testing.T) { observeConcurrent(t, Options{RecordSites: true}) })
}

func observeConcurrent(t *testing.T, o Options) {
	o.Backend, o.Capacity, o.Shards = Pageable, 256<<20, 4
	p := newTestPool(t, o)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := 0; w < 3; w++ {
		go func(w int) {
			var held [][]byte
			sizes := []int{64, 1000, 9000, 100 << 10, 700 << 10, 3 << 20}
			for i := 0; ; i++ {
				select {
				case <-stop:
					for _, b := range held {
						if err := p.Free(b); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
					return
				default:
				}
				b, err := p.Alloc(sizes[(i+w)%len(sizes)])
				if err != nil {
					errs <- err
					return
				}
				held = append(held, b)
				if len(held) > 20 {
					j := (i * 7) % len(held)
					if err := p.Free(held[j]); err != nil {
						errs <- err
						return
					}
					held = append(held[:j], held[j+1:]...)
				}
			}
		}(w)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		m := p.Map()
		for ri, r := range m.Arena.Regions {
			for i, c := range m.Chunks[ri] {
				if c.Kind != heap.ChunkFree && !r.Chunks[i].InUse {
					t.Fatalf("chunk %d holds a %s segment but the arena has it free", i, c.Kind)
				}
				for _, pg := range c.Pages {
					if pg.Live > pg.Blocks {
						t.Fatalf("page %+v", pg)
					}
				}
			}
		}
		bare := 0
		for _, b := range p.Blocks() {
			if b.Size == 0 || b.BlockSize < b.Size {
				t.Fatalf("block %+v", b)
			}
			if len(b.Site) == 0 {
				bare++
			}
		}
		// With sites, only a buffer whose Alloc or Free is under way may lack one.
		if o.RecordSites && bare > 3 {
			t.Fatalf("%d blocks without a site", bare)
		}
		_ = p.Usage()
	}
	close(stop)
	for w := 0; w < 3; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if u := p.Usage(); u.Live != 0 {
		t.Errorf("after all frees: %+v", u)
	}
}

func TestTrace(t *testing.T) {
	var out bytes.Buffer
	p, err := New(Options{Backend: Pageable, Capacity: 64 << 20, Trace: &out, TraceGoroutines: true})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Alloc(100)
	b, _ := p.AllocAligned(5000, 4096)
	done := make(chan []byte)
	go func() { c, _ := p.Alloc(3 << 20); done <- c }()
	c := <-done
	for _, x := range [][]byte{b, a} {
		if err := p.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Free(a); !errors.Is(err, ErrDoubleFree) { // refused: not recorded
		t.Fatalf("double free: %v", err)
	}
	if err := p.Free(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := alloctrace.Read(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 6 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	want := []alloctrace.Event{
		{ID: 0, Size: 100}, {ID: 1, Size: 5000, Align: 4096}, {ID: 2, Size: 3 << 20},
		{Free: true, ID: 1}, {Free: true, ID: 0}, {Free: true, ID: 2},
	}
	for i, e := range evs {
		w := want[i]
		if e.Free != w.Free || e.ID != w.ID || e.Size != w.Size || e.Align != w.Align || (i > 0 && e.At < evs[i-1].At) {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
	}
	if evs[0].Goroutine == 0 || evs[2].Goroutine == evs[0].Goroutine || evs[1].Goroutine != evs[0].Goroutine {
		t.Errorf("goroutines: %d %d %d", evs[0].Goroutine, evs[1].Goroutine, evs[2].Goroutine)
	}

	// A failing writer: the pool works on, Close reports ErrTrace and still releases.
	q, err := New(Options{Backend: Pageable, Capacity: 64 << 20, Trace: failWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := q.Alloc(10)
	if err := q.Free(d); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); !errors.Is(err, ErrTrace) {
		t.Fatalf("Close with a failing trace: %v", err)
	}
	if _, err := q.Alloc(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
