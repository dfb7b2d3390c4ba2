package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
)

// The GOMAXPROCS sweep (case gomaxprocs) asks how the goroutine-safe pool scales. At each
// GOMAXPROCS from 1 up to the CPU count (doubling, and the count itself), it measures in the
// same rounds (interleave) one goroutine doing alloc+free pairs of mixed sizes from one pool,
// N = GOMAXPROCS goroutines doing the same together, and a control: pure arithmetic that
// shares nothing, on one goroutine and on N. The control's speedup is what the machine gives
// right now (a shared VM's second vCPU is often less than a second core), so the pool's
// scaling reads as its speedup over the control's: 1 is perfect.

// controlSteps is the xorshift steps of one control operation: some tens of ns, like a pair.
const controlSteps = 16

// controlSink keeps the control's arithmetic from being optimised away.
var controlSink atomic.Uint64

// sweepProcs lists the GOMAXPROCS values of the sweep for ncpu CPUs.
func sweepProcs(ncpu int) []int {
	var ps []int
	for p := 1; p <= ncpu; p *= 2 {
		ps = append(ps, p)
	}
	if ps[len(ps)-1] != ncpu {
		ps = append(ps, ncpu)
	}
	return ps
}

// sweep runs the GOMAXPROCS sweep and restores GOMAXPROCS. Each GOMAXPROCS gets a pool of its
// own, made after it is set: a pool takes its count of shards from GOMAXPROCS then.
func sweep(s *suite) []result {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var out []result
	for _, p := range sweepProcs(runtime.NumCPU()) {
		runtime.GOMAXPROCS(p)
		out = append(out, sweepAt(s, p)...)
	}
	return out
}

// sweepAt measures the pool and the control at GOMAXPROCS p.
func sweepAt(s *suite, p int) []result {
	c := fmt.Sprintf("gomaxprocs/%d", p)
	pl := resultSet{c: c, impl: "pinmalloc-pool"}
	pool, err := openPool(caseCapacity)
	if err != nil {
		pl.fail(err)
		return pl.out
	}
	m := interleave(s.cfg, []contender{
		{poolPairs(pool, s.ops, 1), 1},
		{poolPairs(pool, s.ops, p), p},
		{control(1), 1},
		{control(p), p},
	})
	if err := errors.Join(m[0].err, m[1].err, m[2].err, m[3].err, pool.close()); err != nil {
		pl.fail(err)
		return pl.out
	}
	poolUp, ctlUp := m[0].m.nsPerOp/m[1].m.nsPerOp, m[2].m.nsPerOp/m[3].m.nsPerOp
	pl.add("ns_per_pair_1g", m[0].m.nsPerOp, "ns")
	pl.add("ns_per_pair_ng", m[1].m.nsPerOp, "ns")
	pl.add("speedup", poolUp, "ratio")
	pl.add("speedup_over_control", poolUp/ctlUp, "ratio")
	ctl := resultSet{c: c, impl: "control"}
	ctl.add("ns_per_op_1g", m[2].m.nsPerOp, "ns")
	ctl.add("ns_per_op_ng", m[3].m.nsPerOp, "ns")
	ctl.add("speedup", ctlUp, "ratio")
	return append(pl.out, ctl.out...)
}

// poolPairs returns the runner of g goroutines doing alloc+free pairs from a, each with the
// sizes of ops from its own offset on; its time per operation is the wall time over all the
// goroutines' pairs.
func poolPairs(a allocator[[]byte], ops []uint32, g int) runner {
	mask := len(ops) - 1
	return parallelRunner(g, func(i, n int, b *barrier) (span, error) {
		off := i * len(ops) / g
		b.wait()
		t0 := monotonic()
		for k := range n {
			buf, err := a.alloc(opSize(ops[(off+k)&mask]))
			if err != nil {
				return span{}, err
			}
			a.touch(buf)
			if err := a.free(buf); err != nil {
				return span{}, err
			}
		}
		return span{t0, monotonic()}, nil
	})
}

// control returns the runner of g goroutines doing controlSteps of xorshift arithmetic per
// operation, each on a state of its own in a register.
func control(g int) runner {
	return parallelRunner(g, func(i, n int, b *barrier) (span, error) {
		x := uint64(i) + 1
		b.wait()
		t0 := monotonic()
		for range n * controlSteps {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		sp := span{t0, monotonic()}
		controlSink.Add(x)
		return sp, nil
	})
}

// printSweep writes the sweep's table.
func printSweep(w io.Writer, rs []result) {
	var rows []string
	for _, p := range sweepProcs(runtime.NumCPU()) {
		c := fmt.Sprintf("gomaxprocs/%d", p)
		if e, ok := failure(rs, c, "pinmalloc-pool"); ok {
			rows = append(rows, fmt.Sprintf("| %d | error: %s | | | | | | |", p, shorten(e)))
			continue
		}
		get := func(im, m string) float64 { v, _ := lookup(rs, c, im, m); return v }
		if _, ok := lookup(rs, c, "pinmalloc-pool", "speedup"); !ok {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | %.2f× | %s | %s | %.2f× | %.2f |", p,
			fmtNs(get("pinmalloc-pool", "ns_per_pair_1g")), fmtNs(get("pinmalloc-pool", "ns_per_pair_ng")), get("pinmalloc-pool", "speedup"),
			fmtNs(get("control", "ns_per_op_1g")), fmtNs(get("control", "ns_per_op_ng")), get("control", "speedup"),
			get("pinmalloc-pool", "speedup_over_control")))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### GOMAXPROCS sweep: pinmalloc-pool pairs (16 B – 8 KiB) on 1 and on N = GOMAXPROCS goroutines, and a CPU-bound control; ns per operation over all goroutines\n\n")
	fmt.Fprintln(w, "| GOMAXPROCS | pool, 1 goroutine | pool, N | pool speedup | control, 1 | control, N | control speedup | pool speedup / control speedup |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}
