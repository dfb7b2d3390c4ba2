package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// The C allocators' footprints, each in a fresh process. What mimalloc holds (mi_process_info's
// committed bytes) and what glibc holds (mallinfo2's arenas and mmapped chunks) are the whole
// process's figures: in one run of every case, mimalloc's exclusive arena of the huge cases
// (2 GiB committed) and the blocks the pair and churn cases left in either allocator would be
// counted as the footprint case's own (a -quick run read mimalloc's larson-low at 7634x live,
// where it holds 30x). So a C allocator's larson and replay run in a child process, this
// program again with cFootprintEnv set, which reads its request (cFootprintRequest, JSON) on
// its standard input, runs it in its own loops and writes its figures (cFootprintReply) on its
// standard output.
//
// A child holds memory in the allocator before its case: glibc's arenas of the Go runtime's
// threads (some 660 KiB: 132 KiB each for the main arena and for each thread that called
// malloc), and mimalloc what it set up, if anything. The C loop gives back what it can
// (malloc_trim, mi_collect), measures what is held then, just before the case starts its
// threads (the baseline: <prefix>_baseline in cloops.h), and cLarson and cReplay leave it out
// of the case's figures and say it (held_baseline_bytes, baseline_held_bytes). The case's
// threads are new ones (the larson threads; the replay's thread), which glibc gives arenas of
// their own, so the baseline's arenas stay as they were under the case: what is left is what
// the case made the allocator take, its threads' arenas included. Not exactly where glibc runs
// out of arenas (8 per core: with 8 larson threads beside the 5, on fewer than 2 cores) and
// the case's threads share the baseline's, or where a Go runtime thread's first malloc comes
// during the case (a child waits for the threads the runtime started as it came up to run
// first: threadsStarted). The case runs on a thread other than the first, whose arena, glibc's
// main one, is the only one the baseline's trim empties (offMainThread).

// cFootprintEnv set in the environment makes this program a footprint child (cFootprintChild).
const cFootprintEnv = "PINMALLOC_BENCH_CFOOTPRINT"

// errFootprintChild is the error of a footprint measurement whose child process failed.
var errFootprintChild = errors.New("the footprint's child process failed")

// cFootprintSelf names the program a footprint child runs: this one (tests replace it).
var cFootprintSelf = os.Executable

// inFootprintChild reports whether this process is a footprint child: its C loops run here.
func inFootprintChild() bool { return os.Getenv(cFootprintEnv) != "" }

// cFootprintImpl returns the function that opens the C allocator of that name, whose
// footprints a child measures, or nil for any other.
func cFootprintImpl(name string) func() impl {
	switch name {
	case "mimalloc":
		return newMimalloc
	case "glibc":
		return newGlibc
	}
	return nil
}

// cFootprintRequest is what a footprint child runs: one larson shape, or one replay.
type cFootprintRequest struct {
	Impl   string         `json:"impl"`
	Larson *larsonRequest `json:"larson,omitempty"`
	Replay *replayRequest `json:"replay,omitempty"`
}

// replayRequest is a trace, as much of it as a C replay plays: each event's ID<<1 | free,
// and the allocations' sizes in order.
type replayRequest struct {
	Events, Sizes []uint64
}

// newReplayRequest writes evs as a replayRequest.
func newReplayRequest(evs []alloctrace.Event) *replayRequest {
	r := &replayRequest{Events: make([]uint64, len(evs))}
	for i, e := range evs {
		r.Events[i] = e.ID << 1
		if e.Free {
			r.Events[i] |= 1
			continue
		}
		r.Sizes = append(r.Sizes, e.Size)
	}
	return r
}

// events reads r back as the trace's events.
func (r *replayRequest) events() ([]alloctrace.Event, error) {
	evs := make([]alloctrace.Event, len(r.Events))
	sizes := r.Sizes
	for i, v := range r.Events {
		evs[i] = alloctrace.Event{ID: v >> 1, Free: v&1 == 1}
		if evs[i].Free {
			continue
		}
		if len(sizes) == 0 {
			return nil, errors.New("a replay request with fewer sizes than allocations")
		}
		evs[i].Size, sizes = sizes[0], sizes[1:]
	}
	return evs, nil
}

// larsonRequest is a larson shape, its steps and its idle time.
type larsonRequest struct {
	Threads, Slots, Lo, Hi, Steps int
	Idle                          time.Duration
}

// cFootprintReply is a footprint child's figures, or what went wrong.
type cFootprintReply struct {
	Larson      *larsonReply  `json:"larson,omitempty"`
	Replay      *replayResult `json:"replay,omitempty"`
	Err         string        `json:"error,omitempty"`
	AllocFailed bool          `json:"alloc_failed,omitempty"` // Err is errAllocFailed's
}

// larsonReply is a larsonResult.
type larsonReply struct {
	Live, End, Idle, Trimmed uint64
	NsPerOp                  float64
	Baseline                 uint64 // held before the case, left out of End, Idle, Trimmed
}

// larsonInChild returns name's larson run (footprint.go), each run in a footprint child.
func larsonInChild(name string) func(larsonShape, int, time.Duration) (larsonResult, error) {
	return func(sh larsonShape, steps int, idle time.Duration) (larsonResult, error) {
		rep, err := runFootprintChild(cFootprintRequest{Impl: name, Larson: &larsonRequest{
			Threads: sh.threads, Slots: sh.slots, Lo: sh.lo, Hi: sh.hi, Steps: steps, Idle: idle}})
		if err != nil {
			return larsonResult{}, err
		}
		if rep.Larson == nil {
			return larsonResult{}, fmt.Errorf("%w: %s: no larson figures in its reply",
				errFootprintChild, name)
		}
		l := rep.Larson
		return larsonResult{live: l.Live, end: l.End, idle: l.Idle, trimmed: l.Trimmed,
			baseline: l.Baseline, nsPerOp: l.NsPerOp}, nil
	}
}

// replayInChild returns name's replay (replay.go), each run in a footprint child.
func replayInChild(name string) func([]alloctrace.Event, int64) (*replayResult, error) {
	return func(evs []alloctrace.Event, _ int64) (*replayResult, error) {
		if len(evs) == 0 {
			return &replayResult{}, nil // nothing to play, nothing held
		}
		rep, err := runFootprintChild(cFootprintRequest{Impl: name, Replay: newReplayRequest(evs)})
		if err != nil {
			return nil, err
		}
		if rep.Replay == nil {
			return nil, fmt.Errorf("%w: %s: no replay figures in its reply", errFootprintChild, name)
		}
		return rep.Replay, nil
	}
}

// runFootprintChild runs req in a footprint child and returns its reply. A child that cannot
// start, exits with an error or writes no reply is errFootprintChild, with the end of what it
// wrote on its standard error; one whose allocation failed is errAllocFailed.
func runFootprintChild(req cFootprintRequest) (cFootprintReply, error) {
	var rep cFootprintReply
	in, err := json.Marshal(req)
	if err != nil {
		return rep, fmt.Errorf("%w: %s: %w", errFootprintChild, req.Impl, err)
	}
	self, err := cFootprintSelf()
	if err != nil {
		return rep, fmt.Errorf("%w: %s: %w", errFootprintChild, req.Impl, err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), cFootprintEnv+"=1")
	cmd.SysProcAttr = dieWithParent()
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err = startChild(cmd); err == nil {
		err = cmd.Wait()
	}
	if err == nil {
		err = json.Unmarshal(stdout.Bytes(), &rep)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 400 {
			msg = "..." + msg[len(msg)-400:]
		}
		if msg != "" {
			msg = ": " + msg
		}
		return rep, fmt.Errorf("%w: %s: %w%s", errFootprintChild, req.Impl, err, msg)
	}
	switch {
	case rep.AllocFailed:
		return rep, errAllocFailed
	case rep.Err != "":
		return rep, fmt.Errorf("%w: %s: %s", errFootprintChild, req.Impl, rep.Err)
	}
	return rep, nil
}

// cFootprintChild is the footprint child's main: it reads its request on the standard input,
// runs it, writes its reply on the standard output and returns its exit status.
func cFootprintChild() int {
	out, err := protocolOutput() // what C or Go code prints goes to the standard error
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: footprint child:", err)
		return 1
	}
	var req cFootprintRequest
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "bench: footprint child: reading the request:", err)
		return 1
	}
	rep := footprintHere(req)
	if err := json.NewEncoder(out).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench: footprint child:", err)
		return 1
	}
	return 0
}

// footprintHere runs req in this process.
func footprintHere(req cFootprintRequest) (rep cFootprintReply) {
	var err error
	defer func() {
		if err != nil {
			rep = cFootprintReply{Err: err.Error(), AllocFailed: errors.Is(err, errAllocFailed)}
		}
	}()
	open := cFootprintImpl(req.Impl)
	if open == nil {
		err = fmt.Errorf("no C allocator named %q", req.Impl)
		return rep
	}
	im := open()
	offMainThread(func() {
		threadsStarted(time.Second)
		rep, err = footprintCase(im, req)
	})
	return rep
}

// footprintCase runs req's case on im.
func footprintCase(im impl, req cFootprintRequest) (rep cFootprintReply, err error) {
	switch {
	case im.skip != "":
		err = fmt.Errorf("%s %s", im.name, im.skip)
	case req.Larson != nil && im.larson != nil:
		l := req.Larson
		var r larsonResult
		sh := larsonShape{threads: l.Threads, slots: l.Slots, lo: l.Lo, hi: l.Hi}
		if r, err = im.larson(sh, l.Steps, l.Idle); err == nil {
			rep.Larson = &larsonReply{Live: r.live, End: r.end, Idle: r.idle, Trimmed: r.trimmed,
				NsPerOp: r.nsPerOp, Baseline: r.baseline}
		}
	case req.Replay != nil && im.replay != nil:
		var evs []alloctrace.Event
		if evs, err = req.Replay.events(); err == nil {
			rep.Replay, err = im.replay(evs, 0)
		}
	default:
		err = fmt.Errorf("%s: nothing to run", im.name)
	}
	return rep, err
}

// threadsStarted waits, for at most limit, until every thread of this process has run and no
// new one has come for a few milliseconds: a thread the Go runtime starts runs runtime/cgo's
// threadentry first, whose free sets up the thread's glibc cache in an arena of its own
// (132 KiB). Started just before a case's baseline and run just after it, such a thread put its
// arena in the case's figures, in about one run in four of larson's one-block case, more often
// under load (the runtime starts its threads as it comes up, which a child does just before its
// case). A thread has run once the kernel has counted time for it (its schedstat's first field).
func threadsStarted(limit time.Duration) {
	const quiet = 3 // checks in a row, a millisecond apart, that find the same threads, all run
	last, same := -1, 0
	for end := time.Now().Add(limit); time.Now().Before(end) && same < quiet; time.Sleep(time.Millisecond) {
		n, ran := threadsRan()
		switch {
		case !ran:
			same = 0
		case n == last:
			same++
		default:
			same = 1
		}
		last = n
	}
}

// threadsRan returns how many threads this process has and whether every one has been on a
// CPU (true when /proc cannot say).
func threadsRan() (int, bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, true
	}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err == nil && strings.HasPrefix(string(b), "0 ") {
			return len(tasks), false
		}
	}
	return len(tasks), true
}
