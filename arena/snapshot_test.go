package arena

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogAndSnapshot runs TestCommitPurgesUnderPressure's story with a logger, and checks the
// snapshot of the chunks on the way.
func TestLogAndSnapshot(t *testing.T) {
	var out bytes.Buffer
	b := &budgeted{Provider: PageableHost(HostOptions{}), budget: 4 << 20}
	a := newTestArena(t, Options{Provider: b, Capacity: 64 << 20, PurgeDelay: -1,
		Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	old, err := a.Alloc(3<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(old); err != nil {
		t.Fatal(err)
	}
	s := a.Snapshot()
	if len(s.Regions) != 1 || len(s.Regions[0].Chunks) != 32 {
		t.Fatalf("snapshot: %+v", s)
	}
	c := s.Regions[0].Chunks
	if c[0].InUse || c[0].Committed != 2<<20 || c[0].Unwanted != 2<<20 || c[0].PurgePending || c[1].Committed != 1<<20 || c[2].Committed != 0 {
		t.Errorf("chunks after a free with no purge delay: %+v %+v %+v", c[0], c[1], c[2])
	}
	if run, unres := s.LargestFreeRun(); run != 64<<20 || unres != 0 {
		t.Errorf("largest free run %d, unreserved %d", run, unres)
	}
	if u := a.Usage(); u.Committed != 3<<20 || u.Reserved != 64<<20 || u.Locked != 0 || u.InUseChunks != 0 {
		t.Errorf("usage %+v", u)
	}
	hold, _ := a.Reserve(4<<20, 1)
	fresh, err := a.Alloc(2<<20, 1) // only a forced purge makes room
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(3<<20, 1); err == nil {
		t.Fatal("Alloc beyond the budget succeeded")
	}
	s = a.Snapshot()
	if run, _ := s.LargestFreeRun(); run != 58<<20 { // 3 chunks in use at the start
		t.Errorf("largest free run %d, want 58 MiB", run)
	}
	for _, sp := range []Span{hold, fresh} {
		if err := a.Free(sp); err != nil {
			t.Fatal(err)
		}
	}
	a.Trim()
	log := out.String()
	for _, want := range []string{
		`msg="pinmalloc: region reserved" provider=pageable size=67108864`,
		`msg="pinmalloc: forced purge" provider=pageable size=2097152 decommitted=3145728`,
		`level=WARN msg="pinmalloc: commit refused" provider=pageable size=3145728`,
		`msg="pinmalloc: trim" provider=pageable decommitted=2097152`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}

	// With a purge delay, freed memory is pending, and the timer's purge is logged.
	out.Reset()
	a2 := newTestArena(t, Options{Provider: PageableHost(HostOptions{}), Capacity: 64 << 20, PurgeDelay: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	sp, _ := a2.Alloc(2<<20, 1)
	_ = a2.Free(sp)
	if c := a2.Snapshot().Regions[0].Chunks[0]; !c.PurgePending || c.Unwanted != 2<<20 {
		t.Errorf("freed chunk with a purge delay: %+v", c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a2.Usage().Committed != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	a2.mu.Lock() // the handler wrote under the arena's lock
	log = out.String()
	a2.mu.Unlock()
	if !strings.Contains(log, `msg="pinmalloc: purge" provider=pageable decommitted=2097152 committed=0`) {
		t.Errorf("no purge logged:\n%s", log)
	}
}

// refusing is a provider that refuses every region.
type refusing struct{ Provider }

func (refusing) Reserve(size, align uintptr) (*Region, error) {
	return nil, fmt.Errorf("%w: %w", ErrReserve, errInjected)
}

func TestLogRegionRefused(t *testing.T) {
	var out bytes.Buffer
	a := newTestArena(t, Options{Provider: refusing{PageableHost(HostOptions{})}, Capacity: 64 << 20,
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if _, err := a.Alloc(1<<20, 1); err == nil {
		t.Fatal("Alloc from a refusing provider succeeded")
	}
	if want := `level=WARN msg="pinmalloc: region refused" provider=pageable size=67108864 reserved=0 capacity=67108864 error=`; !strings.Contains(out.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, out.String())
	}
}
