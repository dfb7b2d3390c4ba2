package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// The footprint cases (issue 38): how much memory an allocator keeps for the buffers it holds
// live, as a user of pinned memory sees it. A larson churn (after the benchmark of that name,
// and issue 38's measurement): larsonThreads goroutines (threads, for the C allocators), each
// keeping slots buffers of uniform random size lo to hi bytes and replacing one at random,
// steps times; then every goroutine keeps its buffers and the allocator sits idle. Each
// allocator reports what it holds at the end of the churn, after footprintIdle (pinmalloc's
// purge delay is 10 ms, mimalloc's 10 ms too), and after it was asked to give back what it can
// (pinmalloc's Trim, mimalloc's mi_collect(true) on every thread, glibc's malloc_trim(0) on
// every thread; the PyTorch-style cache has no such call and keeps its peak): committed bytes
// for pinmalloc and mimalloc, the reserved blocks for the cache, mallinfo2's arenas for glibc
// (what its arenas took from the system: malloc_trim's madvise of free pages inside an arena
// does not lower it, so glibc's idle and trimmed figures are an upper bound on its resident).
// The two shapes: issue 38's low occupancy (8 buffers of 8 B – 64 KiB a goroutine, about
// 2 MiB live) and mimalloc-bench's larson at high occupancy (5000 buffers of 8 – 1000 B a
// thread, about 20 MiB live).
//
// The sizes and slots are drawn by larsonDraw, from the goroutine's number and the step, the
// same in Go and in C (bench_larson_draw in cloops.h), so every allocator sees the same
// sequence on every machine.

// larsonShape is one footprint case's workload.
type larsonShape struct {
	name              string
	threads, slots    int
	lo, hi            int
	steps, quickSteps int
}

var larsonShapes = []larsonShape{
	{name: "larson-low", threads: 8, slots: 8, lo: 8, hi: 64 << 10, steps: 100_000, quickSteps: 20_000},
	{name: "larson-high", threads: 8, slots: 5000, lo: 8, hi: 1000, steps: 100_000, quickSteps: 20_000},
}

// gpuHostPs is the GOMAXPROCS of the GPU check's host (16 cores): footprint/trace-16p's.
const gpuHostPs = 16

// cudaHostName is the CUDAHost pool's name in the footprint suite (-footprint).
const cudaHostName = "pinmalloc-cudahost"

// footprintIdle is how long the allocators sit idle, their buffers live, before the second
// sample: 25 of pinmalloc's and mimalloc's purge delays.
const footprintIdle = 250 * time.Millisecond

// larsonResult is what one allocator held in a larson run.
type larsonResult struct {
	live               uint64 // bytes asked for by the buffers live at the end
	end, idle, trimmed uint64 // held at the end of the churn, after footprintIdle, after a trim
	// baseline is, for a C allocator, what its footprint child held before the case, left out
	// of end, idle and trimmed (cchild.go).
	baseline uint64
	nsPerOp  float64
}

// footprintCases returns the larson footprint cases.
func footprintCases() []benchCase {
	var cs []benchCase
	for _, sh := range larsonShapes {
		cs = append(cs, benchCase{name: "footprint/" + sh.name, group: "footprint", custom: func(s *suite) []result {
			steps := sh.steps
			if s.cfg.quick {
				steps = sh.quickSteps
			}
			var out []result
			for _, im := range s.selected() {
				if im.larson == nil {
					continue
				}
				rs := resultSet{c: "footprint/" + sh.name, impl: im.name}
				r, err := im.larson(sh, steps, footprintIdle)
				if errors.Is(err, errNoFootprint) {
					continue // it cannot say what it holds: no row
				}
				if err != nil {
					rs.fail(err)
				} else {
					rs.larsoned(r)
				}
				out = append(out, rs.out...)
				if im.name == "pinmalloc-pool" {
					out = append(out, poolVariants(sh, steps)...)
				}
			}
			return out
		}})
	}
	return append(cs, benchCase{name: "footprint/latency", group: "footprint", custom: footprintLatency})
}

// The pool's other settings in the larson cases, each a row beside the default pool's:
//   - align16Name: Align 16, mimalloc's and glibc's alignment, against the pool's default of
//     64, whose size classes alone make larson-high's buffers 6.3 % larger than asked;
//   - oneShardName: one shard (Options.Shards 1) for every P, the footprint the pool's design
//     reaches when no P keeps partly used pages of its own, and what it costs in time.
const (
	align16Name  = "pinmalloc-pool-align16"
	oneShardName = "pinmalloc-pool-1shard"
)

// poolVariants runs a larson shape on each of the pool's other settings.
func poolVariants(sh larsonShape, steps int) []result {
	var out []result
	for _, v := range []struct {
		name          string
		align, shards int
	}{{align16Name, 16, 0}, {oneShardName, 0, 1}} {
		rs := resultSet{c: "footprint/" + sh.name, impl: v.name}
		open := func(capacity int64) (allocator[[]byte], error) { return openPoolWith(capacity, v.align, v.shards) }
		r, err := goLarson(open, sh, steps, footprintIdle)
		if err != nil {
			rs.fail(err)
		} else {
			rs.larsoned(r)
		}
		out = append(out, rs.out...)
	}
	return out
}

func (rs *resultSet) larsoned(r larsonResult) {
	rs.add("live_bytes", float64(r.live), "B")
	rs.add("held_end_bytes", float64(r.end), "B")
	rs.add("held_idle_bytes", float64(r.idle), "B")
	rs.add("held_trimmed_bytes", float64(r.trimmed), "B")
	if r.baseline > 0 {
		rs.add("held_baseline_bytes", float64(r.baseline), "B")
	}
	rs.add("idle_over_live", float64(r.idle)/float64(r.live), "ratio")
	rs.add("ns_per_op", r.nsPerOp, "ns")
}

// larsonSeed keys the draws (BENCH_LARSON_SEED in cloops.h).
const larsonSeed = 0x6c6172736f6e3338 // "larson38"

// larsonDraw is the i-th draw of goroutine t: splitmix64 of the pair. The slot is its high
// half scaled to the slots, the size its low half scaled to [lo, hi].
func larsonDraw(t, i uint64) uint64 {
	z := larsonSeed + (t<<40^i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func larsonSize(z uint64, lo, hi int) int { return lo + int((z&0xffffffff)*uint64(hi-lo+1)>>32) }

// errNoFootprint is a larson run's answer for an allocator that cannot say what it holds.
var errNoFootprint = errors.New("the allocator cannot say what it holds")

// trimmer is implemented by Go-side allocators that can give their free memory back on demand.
type trimmer interface {
	trim()
}

// goLarson runs a larson shape on a Go-side allocator, one allocator per goroutine (the same
// one for a goroutine-safe allocator, forks for a single-owner one: openWorkers), and samples
// what it holds.
func goLarson[H any](open func(int64) (allocator[H], error), sh larsonShape, steps int, idle time.Duration) (res larsonResult, err error) {
	workers, owned, err := openWorkers(open, sh.threads)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, closeAll(owned)) }()
	fp, ok := owned[0].(footprinter)
	if !ok {
		return res, errNoFootprint
	}
	slots := make([][]H, sh.threads)
	sizes := make([][]int, sh.threads)
	errs := make([]error, sh.threads)
	defer func() {
		for t := range slots {
			for _, h := range slots[t] {
				firstErr(&err, workers[t].free(h))
			}
		}
	}()
	var wg sync.WaitGroup
	start := time.Now()
	for t := range sh.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := workers[t]
			for i := range sh.slots {
				n := larsonSize(larsonDraw(uint64(t), uint64(i)), sh.lo, sh.hi)
				h, err := a.alloc(n)
				if err != nil {
					errs[t] = err
					return
				}
				a.touch(h)
				slots[t], sizes[t] = append(slots[t], h), append(sizes[t], n)
			}
			s, sz := slots[t], sizes[t]
			for k := range steps {
				z := larsonDraw(uint64(t), uint64(sh.slots+k))
				i := int((z >> 32) * uint64(sh.slots) >> 32)
				if err := a.free(s[i]); err != nil {
					errs[t] = err
					s[i], s[len(s)-1] = s[len(s)-1], s[i]
					slots[t] = s[:len(s)-1]
					return
				}
				sz[i] = larsonSize(z, sh.lo, sh.hi)
				h, err := a.alloc(sz[i])
				if err != nil {
					errs[t] = err
					s[i], s[len(s)-1] = s[len(s)-1], s[i]
					slots[t] = s[:len(s)-1]
					return
				}
				a.touch(h)
				s[i] = h
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for _, sz := range sizes {
		for _, n := range sz {
			res.live += uint64(n)
		}
	}
	res.nsPerOp = float64(elapsed.Nanoseconds()) / float64(sh.threads*(sh.slots+steps))
	res.end, _ = fp.footprint()
	time.Sleep(idle)
	res.idle, _ = fp.footprint()
	res.trimmed = res.idle // an allocator with no such call keeps what it holds
	if _, ok := owned[0].(trimmer); ok {
		for i := len(owned) - 1; i >= 0; i-- { // each worker's own heap, for a single-owner one
			owned[i].(trimmer).trim()
		}
		res.trimmed, _ = fp.footprint()
	}
	return res, nil
}

// cLarson runs a larson shape with a C allocator's loop (cloops.h).
func cLarson(run func(threads, slots, lo, hi, steps, idleMs int) (ns int64, held [3]int64, live, baseline int64)) func(larsonShape, int, time.Duration) (larsonResult, error) {
	return func(sh larsonShape, steps int, idle time.Duration) (larsonResult, error) {
		ns, held, live, base := run(sh.threads, sh.slots, sh.lo, sh.hi, steps, int(idle.Milliseconds()))
		if ns < 0 {
			return larsonResult{}, errAllocFailed
		}
		// What the process held before the case is not the case's (cchild.go).
		less := func(h int64) uint64 { return uint64(max(h-max(base, 0), 0)) }
		return larsonResult{live: uint64(live), end: less(held[0]), idle: less(held[1]), trimmed: less(held[2]),
			baseline: uint64(max(base, 0)), nsPerOp: float64(ns) / float64(sh.threads*(sh.slots+steps))}, nil
	}
}

// The trims of the Go-side allocators.
func (a pinPool) trim() { _ = a.p.Trim() } // the bench runs no stream: no error
func (a *pinHeap) trim() {
	a.h.Trim()
	if a.owner {
		a.ar.Trim()
	}
}

// footprintTargets checks issue 38's footprint targets: the pool's committed memory after it
// sat idle, at most its live bytes plus 1 MiB at low occupancy and 1.1 times them at high.
func footprintTargets(rs []result) []target {
	var ts []target
	others := func(c string) string {
		d := ""
		for _, im := range []string{align16Name, oneShardName, "mimalloc", "glibc", torchName, "pinmalloc-heap"} {
			live, ok1 := lookup(rs, c, im, "live_bytes")
			idle, ok2 := lookup(rs, c, im, "held_idle_bytes")
			trimmed, ok3 := lookup(rs, c, im, "held_trimmed_bytes")
			if ok1 && ok2 && ok3 && live > 0 {
				d += fmt.Sprintf("; %s idle %.2fx, trimmed %.2fx", im, idle/live, trimmed/live)
			}
		}
		return d
	}
	c := "footprint/larson-low"
	live, ok1 := lookup(rs, c, "pinmalloc-pool", "live_bytes")
	idle, ok2 := lookup(rs, c, "pinmalloc-pool", "held_idle_bytes")
	detail := fmt.Sprintf("pinmalloc-pool %.2f MiB for %.2f MiB live%s", idle/(1<<20), live/(1<<20), others(c))
	low := explained(rs, ratio("footprint-low-idle", "pinmalloc-pool committed after sitting idle <= live + 1 MiB (footprint/larson-low)",
		idle, live+1<<20, ok1 && ok2, 1, true, detail), [2]string{c, "pinmalloc-pool"})
	if ok1 && ok2 && !(live > 0) { // the 1 MiB allowed would grade what held nothing live
		low.Status, low.Ratio = unmeasured, 0
		low.Detail = fmt.Sprintf("not a measurement: no live bytes (%g); %s", live, detail)
	}
	ts = append(ts, low)
	c = "footprint/larson-high"
	live, ok1 = lookup(rs, c, "pinmalloc-pool", "live_bytes")
	idle, ok2 = lookup(rs, c, "pinmalloc-pool", "held_idle_bytes")
	ts = append(ts, explained(rs, ratio("footprint-high-idle", "pinmalloc-pool committed after sitting idle <= 1.1x live (footprint/larson-high)",
		idle, live, ok1 && ok2, 1.1, true, fmt.Sprintf("pinmalloc-pool %.2f MiB for %.2f MiB live%s", idle/(1<<20), live/(1<<20), others(c))),
		[2]string{c, "pinmalloc-pool"}))
	// The -footprint suite's serving trace, paced: the CUDAHost pool within 1.15 of its live
	// bytes, and no more than the locked pool holds (memory accounting: graded on the fake
	// driver too, whose VMM granule is the driver's).
	c = "footprint/trace"
	h, hOK := lookup(rs, c, cudaHostName, "committed_over_live")
	l, lOK := lookup(rs, c, "pinmalloc-pool", "committed_over_live")
	detail = fmt.Sprintf("%s %.3f, pinmalloc-pool %.3f", cudaHostName, h, l)
	if v, ok := lookup(rs, "footprint/replay", cudaHostName, "committed_over_live"); ok {
		detail += fmt.Sprintf("; replayed without pauses %.3f", v)
	}
	// The device heap's purge latency means something on a GPU only: on the fake driver (its
	// case says so) device memory is host memory and decommitting it a cost model.
	device := purgeLatencyTarget(rs, "footprint-device-latency-p99", "footprint/device-latency",
		"pinmalloc-device",
		"pinmalloc-device Alloc p99 while the purger trims other streams' heaps <= 2x without a purge (footprint/device-latency)")
	if _, fake := find(rs, "footprint/device-latency", "pinmalloc-device", fakeDriverMetric); fake {
		device = onFakeDriver([]target{device})[0]
	}
	ts = append(ts, purgeLatencyTarget(rs, "footprint-latency-p99", "footprint/latency",
		"pinmalloc-pool",
		"pinmalloc-pool Alloc p99 while the purger works <= 2x without a purge (footprint/latency)"), device)
	h16, h16OK := lookup(rs, "footprint/trace-16p", cudaHostName, "committed_over_live")
	host, locked := [2]string{"footprint/trace", cudaHostName}, [2]string{"footprint/trace", "pinmalloc-pool"}
	ts = append(ts, explained(rs, ratio("footprint-trace-cudahost", "pinmalloc-cudahost peak committed / peak live <= 1.15 (footprint/trace, paced)", h, 1, hOK, 1.15, true, detail), host),
		explained(rs, ratio("footprint-trace-cudahost-16p", fmt.Sprintf("pinmalloc-cudahost peak committed / peak live <= 1.15 at GOMAXPROCS %d, a GPU host's (footprint/trace-16p)", gpuHostPs),
			h16, 1, h16OK, 1.15, true, fmt.Sprintf("%s %.3f", cudaHostName, h16)), [2]string{"footprint/trace-16p", cudaHostName}),
		explained(rs, ratio("footprint-trace-cudahost-vs-locked", "pinmalloc-cudahost peak committed / live <= the locked pool's (footprint/trace)", h, l, hOK && lOK, 1, true, detail), host, locked))
	return ts
}

// fakeDriverMetric is a row a case run on the fake driver records (value 1), so that a target
// whose figure only a GPU gives reads N/A from the results alone.
const fakeDriverMetric = "fake_driver"

// purgeLatencyMinShare is the least share of the bytes freed for the purger that it must give
// back while a purge-latency case's churn is timed for its target to be graded.
const purgeLatencyMinShare = 0.5

// purgeLatencyTarget grades a purge-latency case (c, allocator im): its Alloc p99 with the
// purge on within 2x of it with none. The purge must have worked while the churn was timed:
// given back (purged_bytes_per_run) at least purgeLatencyMinShare of what the case freed for
// it (freed_bytes_per_run); otherwise the side with the purge ran next to none, and the target
// is UNMEASURED, saying so. Where the runs' own ratios disagree by more than the margin to the
// limit it is NOISY (noise.go).
func purgeLatencyTarget(rs []result, name, c, im, want string) target {
	pu, ok1 := lookup(rs, c, im, "alloc_p99_ns_purging")
	np, ok2 := lookup(rs, c, im, "alloc_p99_ns_no_purge")
	p999, _ := lookup(rs, c, im, "alloc_p999_ns_purging")
	n999, _ := lookup(rs, c, im, "alloc_p999_ns_no_purge")
	detail := fmt.Sprintf("p99 %s against %s; p99.9 %s against %s", fmtNs(pu), fmtNs(np), fmtNs(p999), fmtNs(n999))
	freed, ok3 := lookup(rs, c, im, "freed_bytes_per_run")
	purged, ok4 := lookup(rs, c, im, "purged_bytes_per_run")
	work := fmt.Sprintf("purged %.1f MiB a run of %.1f MiB freed", purged/(1<<20), freed/(1<<20))
	t := noiseOf(rs, ratio(name, want, pu, np, ok1 && ok2, 2, true, work+"; "+detail), [2]string{c, im})
	t = explained(rs, t, [2]string{c, im})
	if ok1 && ok2 && !(ok3 && ok4 && freed > 0 && purged >= purgeLatencyMinShare*freed) {
		why := work
		if !ok3 || !ok4 {
			why = "what was freed and purged not counted"
		}
		t = target{Name: name, Want: want, Limit: 2, Status: unmeasured, Detail: fmt.Sprintf(
			"not measured: the purger gave back too little while the churn was timed (%s, under the %g "+
				"needed): no purge to time; %s", why, purgeLatencyMinShare, detail)}
	}
	return t
}

// printFootprint writes the footprint cases' table, when they ran.
func printFootprint(w io.Writer, rs []result) {
	if !ran(rs, "footprint/") {
		return
	}
	fmt.Fprintf(w, "\n### Footprint: memory held for the live buffers (MiB; x live)\n\n")
	fmt.Fprintln(w, "| case | allocator | live | end of churn | idle "+footprintIdle.String()+" | after trim | ns/op |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range footprintTabled() {
		var seen []string
		for _, r := range rs {
			if r.Case != c || slices.Contains(seen, r.Impl) {
				continue
			}
			seen = append(seen, r.Impl)
			if e, failed := failure(rs, c, r.Impl); failed {
				fmt.Fprintf(w, "| %s | %s | error: %s | | | | |\n", c, r.Impl, e)
				continue
			}
			get := func(m string) float64 { v, _ := lookup(rs, c, r.Impl, m); return v }
			live := get("live_bytes")
			cell := func(m string) string {
				v := get(m)
				return fmt.Sprintf("%.2f (%.2fx)", v/(1<<20), v/live)
			}
			fmt.Fprintf(w, "| %s | %s | %.2f | %s | %s | %s | %s |\n", c, r.Impl, live/(1<<20),
				cell("held_end_bytes"), cell("held_idle_bytes"), cell("held_trimmed_bytes"), fmtNs(get("ns_per_op")))
		}
	}
	printBaselines(w, rs)
}

// printBaselines says, under the footprint table, what the C allocators' footprint children
// held before their cases, which their figures leave out (cchild.go), the most of any case.
func printBaselines(w io.Writer, rs []result) {
	var impls []string // in the order the results name them
	most := map[string]float64{}
	for _, r := range rs {
		if !strings.HasPrefix(r.Case, "footprint/") || r.Metric != "held_baseline_bytes" {
			continue
		}
		if _, ok := most[r.Impl]; !ok {
			impls = append(impls, r.Impl)
		}
		most[r.Impl] = max(most[r.Impl], r.Value)
	}
	if len(impls) == 0 {
		return
	}
	var says []string
	for _, im := range impls {
		says = append(says, fmt.Sprintf("%s %.0f KiB", im, most[im]/(1<<10)))
	}
	fmt.Fprintf(w, "\nThe C allocators run each case in a fresh child process, their figures less what "+
		"it held before the case (glibc: the arenas of the Go runtime's threads), at most: %s.\n",
		strings.Join(says, ", "))
}

// footprintTabled lists the cases printFootprint shows: the device heap's and the larson ones.
func footprintTabled() []string {
	cases := []string{"footprint/device"}
	for _, sh := range larsonShapes {
		cases = append(cases, "footprint/"+sh.name)
	}
	return cases
}

// footprintLatency measures what the idle purge costs the allocations that run while it
// works: a pool fills latencyBulk buffers of 16 B to 8 KiB (some 780 MiB asked for) and frees
// them all, which leaves their pages for the purger to give back; then one goroutine churns
// 10,000 live buffers of the same sizes, timing every Alloc, for 1,000,000 operations (300,000
// at -quick), while the purger gives the pages back (the pool's default purge delay, 10 ms:
// its arena's timer decommits them, off the allocating goroutine) or with no purge at all
// (PurgeDelay -1): the same operations with the same sizes, only the purge differs. The two
// pools run in turn, three times each; a percentile is the median of its three runs. The case
// counts what the purging runs freed before the churn and gave back while it was timed
// (freed_bytes_per_run, purged_bytes_per_run): the target needs purgeLatencyMinShare of the
// first given back.
func footprintLatency(s *suite) []result {
	ops := 1_000_000
	if s.cfg.quick {
		ops = 300_000
	}
	var out []result
	if !s.cfg.implFilter.MatchString("pinmalloc-pool") {
		return nil
	}
	rs := resultSet{c: "footprint/latency", impl: "pinmalloc-pool"}
	var freed uint64
	purged, errs := latencyRounds(&rs, func(purge bool) ([3]float64, uint64, error) {
		q, f, n, err := latencyRun(purge, ops)
		if purge {
			freed += f
		}
		return q, n, err
	})
	if err := errors.Join(errs...); err != nil {
		rs.fail(err)
		return rs.out
	}
	rs.add("freed_bytes_per_run", float64(freed)/3, "B")   // freed before the purging runs' churn
	rs.add("purged_bytes_per_run", float64(purged)/3, "B") // given back while the churn was timed
	return append(out, rs.out...)
}

// latencyBulk is how many buffers footprintLatency's pool fills and frees before its churn.
const latencyBulk = 200_000

// latencyRun is one run of footprintLatency: the p50, p99 and p99.9 of its Alloc times, the
// bytes asked for by the buffers freed before the churn, and the bytes the pool purged during
// the churn.
func latencyRun(purge bool, ops int) (q [3]float64, freed, purged uint64, err error) {
	o := pinned.Options{Capacity: 1 << 30, Backend: pinned.Locked}
	if hostMemory.pageable {
		o.Backend = pinned.Pageable
	}
	if !purge {
		o.PurgeDelay = -1
	}
	p, err := pinned.New(o)
	if err != nil {
		return q, 0, 0, err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	size := func(z uint64) int { return larsonSize(z, 16, 8<<10) }
	// The room for the samples and the live set is made first: made after the bulk frees, a
	// make of megabytes could stall while the purge they started runs, past it under load.
	ns := make([]int64, 0, ops)
	live := make([][]byte, 10_000)
	bulk := make([][]byte, latencyBulk)
	defer func() {
		for _, b := range bulk {
			if b != nil {
				err = errors.Join(err, p.Free(b))
			}
		}
	}()
	for i := range bulk {
		if bulk[i], err = p.Alloc(size(larsonDraw(9, uint64(i)))); err != nil {
			return q, 0, 0, err
		}
	}
	for i, b := range bulk {
		if err := p.Free(b); err != nil {
			return q, 0, 0, err
		}
		bulk[i], freed = nil, freed+uint64(len(b))
	}
	defer func() {
		for _, b := range live {
			if b != nil {
				err = errors.Join(err, p.Free(b))
			}
		}
	}()
	before := p.Stats().Purged
	for k := range ops {
		z := larsonDraw(10, uint64(k))
		i := int((z >> 32) * uint64(len(live)) >> 32)
		if live[i] != nil {
			if err := p.Free(live[i]); err != nil {
				return q, 0, 0, err
			}
		}
		t0 := time.Now()
		b, err := p.Alloc(size(z))
		ns = append(ns, int64(time.Since(t0)))
		if err != nil {
			return q, 0, 0, err
		}
		live[i] = b
	}
	return percentiles(ns), freed, p.Stats().Purged - before, nil
}
