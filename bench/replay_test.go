package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestReplay records a trace through a traced pool and replays it against the Go-side
// allocators: every allocation and free is played, and the peak live bytes are the trace's.
func TestReplay(t *testing.T) {
	var buf bytes.Buffer
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, Trace: &buf})
	if err != nil {
		t.Fatal(err)
	}
	var held [][]byte
	for i := 0; i < 100; i++ {
		b, err := p.Alloc(1000 + i*5000)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
		if i%3 == 2 {
			if err := p.Free(held[0]); err != nil {
				t.Fatal(err)
			}
			held = held[1:]
		}
	}
	for _, b := range held {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := alloctrace.Read(&buf)
	if err != nil || len(evs) != 200 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	var live, peak uint64
	size := map[uint64]uint64{}
	for _, e := range evs {
		if e.Free {
			live -= size[e.ID]
		} else {
			size[e.ID] = e.Size
			live += e.Size
		}
		peak = max(peak, live)
	}
	impls := []impl{newGoMake()}
	var lim unix.Rlimit
	if os.Geteuid() == 0 || unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur >= 256<<20 {
		impls = append(impls, newPinmallocHeap(), newPinmallocPool()) // locked memory
	} else {
		t.Log("RLIMIT_MEMLOCK below 256 MiB: the pinmalloc allocators (locked memory) are not replayed")
	}
	if g := newGlibc(); g.skip == "" {
		impls = append(impls, g) // a C allocator: its loop reports no footprint
	}
	for _, im := range impls {
		r, err := im.replay(evs, replayCapacity(evs))
		if err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		c := im.name == "glibc"
		if r.Events != 200 || r.PeakLive != peak || (r.PeakHeld < peak) != c || r.NsPerOp <= 0 {
			t.Errorf("%s: %+v, want peak live %d", im.name, r, peak)
		}
	}
}

// TestShippedTrace checks the trace shipped in bench/traces reads back.
func TestShippedTrace(t *testing.T) {
	f, err := os.Open("traces/serving.pmtrace")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := alloctrace.Read(f)
	if err != nil || len(evs) < 1000 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
}

// TestReplayHugeSizes: a trace asking for sizes beyond the address space is refused as
// malformed before anything is played (1<<60 made make panic, 3<<60 made replayCapacity
// loop for ever), one beyond the machine's memory is refused too (make would end the process),
// and replayCapacity returns for any events, capped where doubling stops.
func TestReplayHugeSizes(t *testing.T) {
	cfg := &config{implFilter: regexp.MustCompile("")}
	for _, size := range []uint64{1 << 60, 3 << 60} {
		// By hand: the Writer refuses what Read refuses. One allocation: op, dt 0, the size,
		// the pool's alignment, goroutine 1.
		b := binary.AppendUvarint([]byte(alloctrace.Magic+"\x01\x00"), size)
		path := filepath.Join(t.TempDir(), "huge.pmtrace")
		if err := os.WriteFile(path, append(b, 0, 1), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := runReplay(cfg, []impl{newGoMake()}, path); !errors.Is(err, alloctrace.ErrFormat) {
			t.Errorf("replay of a trace of %#x bytes: %v, want alloctrace.ErrFormat", size, err)
		}
	}
	// Within the address space but beyond the machine's memory: refused before make would end
	// the process.
	var buf bytes.Buffer
	w := alloctrace.NewWriter(&buf)
	if err := w.Alloc(0x1000, alloctrace.MaxBytes/2, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.pmtrace")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReplay(cfg, []impl{newGoMake()}, path); err == nil || !strings.Contains(err.Error(), "more than this machine's") {
		t.Errorf("replay of a trace of 64 TiB: %v", err)
	}
	done := make(chan int64)
	go func() {
		c := replayCapacity([]alloctrace.Event{{Size: 3 << 60}, {ID: 1, Size: 1 << 63}})
		done <- c
	}()
	select {
	case c := <-done:
		if c <= 0 || c < caseCapacity {
			t.Errorf("replayCapacity of huge events = %d", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replayCapacity of events of 3<<60 bytes did not return")
	}
}
