package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Trace replay (-replay FILE) and recording (-record FILE). A trace is what a pinned.Pool
// writes with Options.Trace (format: internal/alloctrace). Replay plays its allocations and
// frees, in order, on one goroutine and without its pauses, against every allocator (the
// pinmalloc heap and pool, make([]byte), a sync.Pool, mmap+mlock per buffer; mimalloc and
// glibc in a C loop, cloops.h), writing each block's first byte, and reports the time of the
// calls and the peak memory each held (committed for pinmalloc, heap in use for Go, what
// mallinfo2 and mi_process_info report for glibc and mimalloc) against the trace's peak live
// bytes. Alignments are not replayed (the allocators
// under test take none), nor goroutines. Locked memory is resident as soon as it is
// committed, where the others fault in only the page written: a fresh 4 MiB pinned buffer
// costs its whole commit, a malloc'ed one a page.
//
// -record plays the bench's own serving trace (the "trace" case: a thousand buffers a second,
// 4 KiB to 4 MiB, each living 10 ms to 1.5 s) through a traced pool, paced as the case paces
// it, and writes the trace to FILE: bench/traces/serving.pmtrace is one.

// replayResult is one allocator's replay.
type replayResult struct {
	Impl         string  `json:"impl"`
	Events       int     `json:"events"`
	NsPerOp      float64 `json:"ns_per_op"`
	PeakHeld     uint64  `json:"peak_held_bytes"`
	PeakResident uint64  `json:"peak_resident_bytes"`
	PeakLive     uint64  `json:"peak_live_bytes"`
	// Baseline is, for a C allocator, what its footprint child held before the replay, left
	// out of PeakHeld (cchild.go).
	Baseline uint64 `json:"baseline_held_bytes,omitempty"`
	Skipped  string `json:"skipped,omitempty"`
}

// cReplay plays evs with a C allocator's replay loop (cloops.h), which times the whole loop and
// samples the memory the allocator holds from the OS (glibc: mallinfo2's arenas and mmapped
// chunks; mimalloc: its committed bytes) for the peak held; the peak resident is not measured.
// The glibc loops call libc.so.6's own malloc (glibc.go), so mallinfo2 sees their blocks
// whatever else is loaded.
func cReplay(replay func(ev []uint64, nalloc int) (ns int64, peak, baseline uint64), evs []alloctrace.Event) (*replayResult, error) {
	ev := make([]uint64, len(evs))
	res := &replayResult{Events: len(evs)}
	var nalloc int
	var live uint64
	size := map[uint64]uint64{}
	for i, e := range evs {
		if e.Free {
			ev[i] = e.ID<<1 | 1
			live -= size[e.ID]
			continue
		}
		ev[i] = e.Size << 1
		size[e.ID] = e.Size
		live += e.Size
		res.PeakLive = max(res.PeakLive, live)
		nalloc++
	}
	if len(ev) == 0 {
		return res, nil
	}
	runtime.GC()
	ns, held, base := replay(ev, nalloc)
	// What the process held before the replay is not the replay's (cchild.go).
	res.PeakHeld, res.Baseline = held-min(held, base), base
	if ns == -2 {
		return nil, errors.New("the replay's thread could not start")
	}
	if ns < 0 {
		return nil, errors.New("an allocation failed")
	}
	res.NsPerOp = float64(ns) / float64(len(evs))
	return res, nil
}

// replaySample is how many events pass between samples of the footprint.
const replaySample = 256

// replayLoop plays evs against a.
func replayLoop[H any](a allocator[H], evs []alloctrace.Event) (res *replayResult, err error) {
	fp, _ := a.(footprinter) // without it, the peaks held are reported as zero
	var n uint64
	for _, e := range evs {
		if !e.Free {
			n = max(n, e.ID+1)
		}
	}
	held := make([]H, n)
	sizes := make([]uint64, n)
	isHeld := make([]bool, n)
	defer func() {
		for i, h := range held {
			if isHeld[i] {
				firstErr(&err, a.free(h))
			}
		}
	}()
	res = &replayResult{Events: len(evs)}
	var live uint64
	var opTime time.Duration
	runtime.GC()
	for i := 0; i < len(evs); {
		t0 := time.Now()
		end := min(i+replaySample, len(evs))
		for ; i < end; i++ {
			e := evs[i]
			if e.Free {
				if err := a.free(held[e.ID]); err != nil {
					return nil, fmt.Errorf("event %d: free of allocation %d: %w", i, e.ID, err)
				}
				var zero H
				held[e.ID], isHeld[e.ID] = zero, false
				live -= sizes[e.ID]
				continue
			}
			h, err := a.alloc(int(e.Size))
			if err != nil {
				return nil, fmt.Errorf("event %d: alloc of %d bytes: %w", i, e.Size, err)
			}
			a.touch(h)
			held[e.ID], sizes[e.ID], isHeld[e.ID] = h, e.Size, true
			live += e.Size
			res.PeakLive = max(res.PeakLive, live)
		}
		opTime += time.Since(t0)
		if fp != nil {
			h, r := fp.footprint()
			res.PeakHeld, res.PeakResident = max(res.PeakHeld, h), max(res.PeakResident, r)
		}
	}
	if len(evs) > 0 {
		res.NsPerOp = float64(opTime.Nanoseconds()) / float64(len(evs))
	}
	return res, nil
}

// replayCapacity is the capacity of the allocators a trace is replayed against: room for its
// peak live bytes four times over, and at least a case's capacity. It doubles up to
// maxReplayCapacity at most (a trace from alloctrace.Read peaks within alloctrace.MaxBytes, a
// quarter of it; the cap keeps any events from overflowing the doubling into a loop).
func replayCapacity(evs []alloctrace.Event) int64 {
	peak := peakLive(evs)
	c := int64(caseCapacity)
	for c < maxReplayCapacity && uint64(c)/4 < peak {
		c *= 2
	}
	return c
}

// maxReplayCapacity bounds replayCapacity: 4 × alloctrace.MaxBytes.
const maxReplayCapacity = 4 * alloctrace.MaxBytes

// peakLive returns the most bytes evs hold live at once.
func peakLive(evs []alloctrace.Event) uint64 {
	var live, peak uint64
	size := map[uint64]uint64{}
	for _, e := range evs {
		if e.Free {
			live -= size[e.ID]
			continue
		}
		size[e.ID] = e.Size
		live += e.Size
		peak = max(peak, live)
	}
	return peak
}

// checkFits refuses a trace whose peak live bytes exceed the machine's memory: make would
// end the process ("fatal error: runtime: out of memory" cannot be recovered), not fail.
func checkFits(evs []alloctrace.Event) error {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil // unknown: let the allocators try
	}
	ram := uint64(si.Totalram) * uint64(si.Unit)
	if peak := peakLive(evs); peak > ram {
		return fmt.Errorf("the trace holds up to %d bytes live, more than this machine's %d bytes of memory", peak, ram)
	}
	return nil
}

// runReplay replays the trace in path against every Go-side allocator, prints a table and,
// with -out, writes <out>/<name>-replay.json.
func runReplay(cfg *config, impls []impl, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	evs, err := alloctrace.Read(f)
	f.Close()
	if err == nil {
		err = checkFits(evs)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	capacity := replayCapacity(evs)
	fmt.Fprintf(os.Stderr, "bench: replaying %d events of %s (capacity %d MiB)\n", len(evs), path, capacity>>20)
	var results []replayResult
	var failed []string
	for _, im := range impls {
		if !cfg.implFilter.MatchString(im.name) {
			continue
		}
		r := replayResult{Impl: im.name, Events: len(evs)}
		switch {
		case im.skip != "":
			r.Skipped = im.skip
		case im.replay == nil:
			r.Skipped = "no Go-side allocator to replay against"
		default:
			got, err := im.replay(evs, capacity)
			if err != nil {
				r.Skipped = "failed: " + err.Error()
				failed = append(failed, im.name)
			} else {
				r, r.Impl = *got, im.name
			}
		}
		results = append(results, r)
	}
	stdout := newFitWriter(os.Stdout, cfg.width())
	printReplay(stdout, path, results)
	stdout.Flush()
	var errFailed error // said in the table: the error names the allocators only
	if len(failed) > 0 {
		errFailed = fmt.Errorf("%w: %s", errReplayFailed, strings.Join(failed, ", "))
	}
	if cfg.out == "" {
		return errFailed
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	doc := struct {
		Machine machine        `json:"machine"`
		Trace   string         `json:"trace"`
		Results []replayResult `json:"results"`
	}{thisMachine(cfg.quick, loadAvg()), filepath.Base(path), results}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	out := filepath.Join(cfg.out, cfg.name+"-replay.json")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: wrote", out)
	return errFailed
}

// errReplayFailed is runReplay's error when an allocator failed to replay the trace (after it
// wrote what the others measured); the table says why.
var errReplayFailed = errors.New("an allocator failed to replay the trace (the table says why)")

func printReplay(w io.Writer, path string, rs []replayResult) {
	fmt.Fprintf(w, "\n## Replay of %s\n\n| allocator | time per call | peak held | peak resident | peak live | held / live |\n|---|---|---|---|---|---|\n", filepath.Base(path))
	for _, r := range rs {
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %s | %s | | | | |\n", r.Impl, r.Skipped)
			continue
		}
		if r.PeakHeld == 0 {
			fmt.Fprintf(w, "| %s | %s | n/a | n/a | %.1f MiB | |\n", r.Impl, fmtNs(r.NsPerOp), float64(r.PeakLive)/(1<<20))
			continue
		}
		resident := "n/a" // the C loops measure what they hold, not what is resident
		if r.PeakResident > 0 {
			resident = fmt.Sprintf("%.1f MiB", float64(r.PeakResident)/(1<<20))
		}
		fmt.Fprintf(w, "| %s | %s | %.1f MiB | %s | %.1f MiB | %.2f |\n", r.Impl, fmtNs(r.NsPerOp),
			float64(r.PeakHeld)/(1<<20), resident, float64(r.PeakLive)/(1<<20),
			float64(r.PeakHeld)/float64(r.PeakLive))
	}
	for _, r := range rs {
		if r.Baseline > 0 {
			fmt.Fprintf(w, "\n%s: played in a fresh child process, its peak held less the %.0f KiB "+
				"the child held before (the arenas of the Go runtime's threads, for glibc).\n",
				r.Impl, float64(r.Baseline)/(1<<10))
		}
	}
}

// recordServing plays the serving trace of the given length through a traced pinned pool,
// paced one step per traceStep, and writes the trace to path.
func recordServing(path string, steps int) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { firstErr(&err, f.Close()) }()
	p, err := pinned.New(pinned.Options{Capacity: traceCapacity, Backend: pinned.Pageable, Trace: f})
	if err != nil {
		return err
	}
	tr := newTrace(steps)
	held := make([][]byte, len(tr.sizes))
	start := time.Now()
	for t := range tr.steps {
		if d := time.Until(start.Add(time.Duration(t) * traceStep)); d > 0 {
			time.Sleep(d)
		}
		for _, i := range tr.frees[t] {
			if err := p.Free(held[i]); err != nil {
				return err
			}
			held[i] = nil
		}
		for i := tr.start[t]; i < tr.start[t+1]; i++ {
			if held[i], err = p.Alloc(int(tr.sizes[i])); err != nil {
				return err
			}
		}
	}
	for _, b := range held {
		if b != nil {
			if err := p.Free(b); err != nil {
				return err
			}
		}
	}
	return p.Close()
}
