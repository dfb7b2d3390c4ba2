package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Seeds of the generated workloads: fixed, so that every run and every allocator sees the
// same sizes, slots and lifetimes.
const (
	mixedSeed = 0x6d697865645f6f70 // "mixed_op"
	traceSeed = 0x7365727665747263 // "servetrc"
	opsLen    = 1 << 16            // ops in the churn sequence (a power of two; loops wrap)
)

// Sizes of the fixed-size pair cases. 4 KiB is there for the per-call pinning target.
var pairSizes = []int64{16, 64, 1 << 10, 4 << 10, 8 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20}

// Sizes of the huge-object cases; the last is the whole pool.
var hugeSizes = []int64{64 << 20, 128 << 20, 256 << 20, 512 << 20, 1 << 30, 1536 << 20, hugeCapacity}

// hugeCapacity is the fixed capacity of the pool (or mimalloc arena) in the huge cases.
const hugeCapacity = 2 << 30

// benchCase is one workload, run on every allocator that takes part in it.
type benchCase struct {
	name  string
	group string // pair, mixed, prodcons, churn, trace, huge or sweep
	size  int64  // block size of a pair, churn or huge case
	g     int    // goroutines of a mixed case
	live  int    // live blocks of a churn case
	// custom, when set, runs the whole case itself instead of once per allocator (the
	// GOMAXPROCS sweep, the GPU suites' bandwidth cases).
	custom func(s *suite) []result
}

// cases lists every case in the order they run; the churn cases go up to maxLive live blocks.
func cases(maxLive int) []benchCase {
	var cs []benchCase
	for _, sz := range pairSizes {
		cs = append(cs, benchCase{name: "pair/" + sizeName(sz), group: "pair", size: sz})
	}
	cs = append(cs,
		benchCase{name: "mixed/1g", group: "mixed", g: 1},
		benchCase{name: "mixed/2g", group: "mixed", g: 2},
		benchCase{name: "prodcons", group: "prodcons"},
	)
	cs = append(cs, churnCases(maxLive)...)
	cs = append(cs,
		benchCase{name: "gomaxprocs", group: "sweep", custom: sweep},
		benchCase{name: "trace", group: "trace"},
	)
	cs = append(cs, footprintCases()...)
	for _, sz := range hugeSizes {
		cs = append(cs, benchCase{name: "huge/" + sizeName(sz), group: "huge", size: sz})
	}
	return cs
}

// run measures the allocators ims on case c and returns their results in the order of ims;
// an allocator that does not take part in c has none. The trace and huge cases run the
// allocators one after another, the others run them together, in rounds (interleave).
func (s *suite) run(c benchCase, ims []impl) []result {
	var out []result
	if c.group == "trace" || c.group == "huge" {
		for _, im := range ims {
			out = append(out, s.runAlone(c, im)...)
		}
		return out
	}
	type entrant struct {
		rs resultSet
		w  workload
		k  int // its contender, or -1 when its workload did not open
	}
	var es []entrant
	var cs []contender
	for _, im := range ims {
		open, unit := s.workload(c, im)
		if open == nil {
			continue
		}
		e := entrant{rs: resultSet{c: c.name, impl: im.name}, k: -1}
		if w, err := open(); err != nil {
			e.rs.fail(err)
		} else {
			e.w, e.k = w, len(cs)
			cs = append(cs, contender{w.run, unit})
		}
		es = append(es, e)
	}
	outs := interleave(s.cfg, cs)
	for _, e := range es {
		if e.k >= 0 {
			e.rs.measured(outs[e.k].m, errors.Join(outs[e.k].err, e.w.close()))
		}
		out = append(out, e.rs.out...)
	}
	return out
}

// workload returns the opener of im's workload on case c, measured in rounds, and the unit
// its operation counts must be a multiple of; nil when im does not take part in c.
func (s *suite) workload(c benchCase, im impl) (func() (workload, error), int) {
	switch {
	case c.group == "pair" && im.pair != nil && (im.maxPair == 0 || c.size <= im.maxPair):
		return func() (workload, error) { return im.pair(int(c.size)) }, 1
	case c.group == "mixed" && im.mixed != nil:
		return func() (workload, error) { return im.mixed(s.ops, c.g) }, c.g
	case c.group == "prodcons" && im.prodcons != nil:
		return func() (workload, error) { return im.prodcons(s.ops) }, batchLen
	case c.group == "churn" && im.churn != nil:
		return func() (workload, error) { return im.churn(c.live, int(c.size)) }, 1
	}
	return nil, 0
}

// runAlone runs one allocator on a trace or huge case. It returns nil when the allocator does
// not take part.
func (s *suite) runAlone(c benchCase, im impl) []result {
	rs := resultSet{c: c.name, impl: im.name}
	switch {
	case c.group == "trace" && im.trace != nil:
		tr, err := im.trace(s.trace)
		if err != nil {
			rs.fail(err)
			break
		}
		tr.impl = im.name
		s.traces = append(s.traces, tr)
		rs.traced(tr)
	case c.group == "huge" && im.huge != nil:
		rs.huge(c.size, im.huge(hugeCapacity, c.size))
	}
	return rs.out
}

// resultSet collects the results of one allocator on one case.
type resultSet struct {
	c, impl string
	out     []result
}

func (rs *resultSet) add(metric string, v float64, unit string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		rs.out = append(rs.out, result{Case: rs.c, Impl: rs.impl, Metric: metric, Unit: unit, Note: "not a number"})
		return
	}
	rs.out = append(rs.out, result{Case: rs.c, Impl: rs.impl, Metric: metric, Value: v, Unit: unit})
}

func (rs *resultSet) fail(err error) {
	note := strings.ReplaceAll(err.Error(), "\n", "; ") // errors.Join writes one per line
	rs.out = append(rs.out, result{Case: rs.c, Impl: rs.impl, Metric: "error", Note: note})
}

func (rs *resultSet) measured(m measurement, err error) {
	if err != nil {
		rs.fail(err)
		return
	}
	rs.add("ns_per_pair", m.nsPerOp, "ns")
	rs.add("ops_per_sec", m.opsPerSec(), "1/s")
	rs.add("cpu_ns_per_pair", m.cpuNsPerOp, "ns")
	rs.add("gc_cpu_fraction", m.gcFraction, "ratio")
	if m.spread > 0 {
		rs.add("round_spread", m.spread, "ratio")
	}
}

func (rs *resultSet) traced(tr *traceResult) {
	rs.add("peak_live_bytes", float64(tr.peakLive), "B")
	rs.add("peak_bytes", float64(tr.peakFootprint), "B")
	rs.add("committed_over_live", float64(tr.peakFootprint)/float64(tr.peakLive), "ratio")
	rs.add("committed_over_live_mean", tr.sumFootprint/tr.sumLive, "ratio")
	rs.add("peak_resident_bytes", float64(tr.peakResident), "B")
	rs.add("wall_seconds", tr.wall.Seconds(), "s")
	rs.add("ns_per_op", tr.nsPerOp, "ns")
	rs.add("gc_cpu_fraction", tr.gcFraction, "ratio")
	rs.add("late_steps", float64(tr.late), "steps")
	for _, st := range tr.stats {
		rs.add(st.metric, st.value, st.unit)
	}
}

// huge records a huge case: alloc_ok 1 or 0 (a refusal, its note saying why: a finding about
// the allocator), or an error when the block was allocated but its free or the allocator's
// close then failed.
func (rs *resultSet) huge(size int64, h hugeResult) {
	ok := 0.0
	if h.ok {
		ok = 1
	}
	rs.add("alloc_ok", ok, "bool")
	if h.ok {
		rs.add("alloc_ns", h.ns, "ns")
	}
	last := &rs.out[len(rs.out)-1]
	switch {
	case h.ok && h.err != nil: // allocated, then its free or the allocator's close failed
		rs.fail(fmt.Errorf("the block was allocated, then: %w", h.err))
	case h.err != nil: // refused: a finding about the allocator, not a failure of the run
		last.Note = h.err.Error()
	case h.note != "":
		last.Note = h.note
	}
}

// mixedOps returns the churn sequence: block sizes log-uniform in 16 B – 8 KiB, each into a
// uniformly drawn slot.
func mixedOps() []uint32 {
	r := rand.New(rand.NewPCG(mixedSeed, 1))
	ops := make([]uint32, opsLen)
	for i := range ops {
		ops[i] = uint32(logUniform(r, 16, 8<<10))<<slotBits | uint32(r.IntN(1<<slotBits))
	}
	return ops
}

// logUniform draws an integer whose logarithm is uniform in [log lo, log hi].
func logUniform(r *rand.Rand, lo, hi float64) int {
	return int(math.Round(lo * math.Pow(hi/lo, r.Float64())))
}

// trace is a serving-like allocation trace: request and KV-cache-like buffers of
// 4 KiB – 4 MiB (log-uniform) arriving about once a step at a rate that swings ±70 % in waves
// of wavePeriod steps, each living 10 – 1500 steps (log-uniform). The trace is the same on
// every machine; traceLoop replays it one step per traceStep.
type trace struct {
	steps int
	sizes []int32   // bytes of each allocation, in order of arrival
	start []int     // the allocations of step t are start[t] <= i < start[t+1]
	frees [][]int32 // the allocations freed at the beginning of step t
}

const wavePeriod = 2000

// newTrace generates the trace of the given length from traceSeed.
func newTrace(steps int) *trace {
	r := rand.New(rand.NewPCG(traceSeed, 2))
	tr := &trace{steps: steps, start: make([]int, steps+1), frees: make([][]int32, steps)}
	for t := range steps {
		tr.start[t] = len(tr.sizes)
		rate := 1 + 0.7*math.Sin(2*math.Pi*float64(t)/wavePeriod)
		for range int(rate + r.Float64()) {
			i := int32(len(tr.sizes))
			tr.sizes = append(tr.sizes, int32(logUniform(r, 4<<10, 4<<20)))
			if die := t + logUniform(r, 10, 1500); die < steps {
				tr.frees[die] = append(tr.frees[die], i)
			}
		}
	}
	tr.start[steps] = len(tr.sizes)
	return tr
}

// freed counts the frees that happen during the trace (the rest happen after it).
func (tr *trace) freed() int {
	n := 0
	for _, f := range tr.frees {
		n += len(f)
	}
	return n
}

// sizeName writes a size the way case names do: 64B, 8KiB, 256MiB, 1GiB.
func sizeName(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// fmtNs writes a duration in nanoseconds with a fitting unit.
func fmtNs(ns float64) string {
	d := time.Duration(ns)
	switch {
	case ns < 1000:
		return fmt.Sprintf("%.1f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	}
	return d.Round(time.Millisecond).String()
}
