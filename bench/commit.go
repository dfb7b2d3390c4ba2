package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The pinning suite (issue 21) measures what pinning memory costs per GiB at 1, 2, 4 and 8
// commit workers (arena.Options.CommitWorkers), beside a CPU-bound control run on as many
// goroutines (what the machine gives: the control's speedup bounds any CPU-bound one):
//
//   - commit/vmm-precommit/MODEL: Precommit of VMM host memory (cuMemCreate at a host location,
//     cuMemMap, cuMemSetAccess per granule), then Trim's decommit;
//   - commit/register-span/{4k,thp}/MODEL: one span registered in one call (the workers fault it
//     in first, with transparent huge pages advised or not), then its decommit;
//   - commit/register-precommit/MODEL: Precommit on the registration path (one registration per
//     chunk, several at once);
//   - commit/locked: mmap + mlock of one span in pieces on the workers (no driver: real kernel
//     work on this machine; only where RLIMIT_MEMLOCK allows a GiB);
//   - commit/latency: the p50 and p99 of alloc+free pairs (mixed sizes, 16 B – 8 KiB) of a
//     CUDAHost pool while a 4 GiB Precommit runs in the background, against an idle pool, and
//     the first 1 MiB Alloc of a pool whose precommit has just started (it commits its own
//     chunk: it must not wait for the precommit).
//
// On a GPU, MODEL is "driver": the real driver's cost. On the fake driver (no GPU) the cost is
// the fake's model (fakecuda.SetPinCost): "populate" makes every pinning call fault in the
// pages it pins (real page faults on this machine's cores, outside the fake's lock), and
// "h100" stands for the H100's measured times as a sleep outside the lock: 0.4 ms to create,
// map and grant a 2 MiB VMM host granule and 0.2 ms to release it (the low ends of what was
// measured; no page faulted in here: the driver's time includes them), and for a registration
// the pages not yet present faulted in here, then 8.5 ms per 128 MiB (measured for memory
// populated beforehand). What the fake's figures show:
// that the workers overlap their calls (overlap_Nw, fake only: the most pinning and unpinning
// calls inside the model's cost at once, over the rounds), and what faulting pages costs here;
// what they cannot: how the real driver scales with threads (the sleep assumes a driver that
// serializes nothing). Nor does a speedup past GOMAXPROCS workers say much here: a worker
// blocked in a driver call keeps its P until the runtime's sysmon takes it back, which it does
// late when the process has been quiet, so on the 2-vCPU build machine the h100 model's 4
// workers overlap 2 calls in most rounds and 4 in the rest (their speedup 1.1 – 3). The H100
// figures wait for a GPU session (`go run . -commit` in bench/ there).
type commitSuite struct {
	pub  *cuda.Device
	dev  *icuda.Device
	fake *fakecuda.Driver // nil on a GPU
	size uintptr          // bytes pinned per measurement
	lat  uintptr          // bytes the latency case precommits
}

func init() { gpuSuites = append(gpuSuites, &commitSuite{}) }

// commitWorkers are the worker counts of the sweep.
var commitWorkers = []int{1, 2, 4, 8}

// Targets of issue 21.
const (
	commitTargetMsPerGiB = 50 // pinning 1 GiB on the H100, whichever path the driver offers
	commitLatencyRatio   = 2  // p99 during a background precommit within 2x of idle
)

// commitModel is a cost model of the fake (none: the real driver, or no driver at all).
type commitModel struct {
	name string
	// populate, pin and unpin are fakecuda.SetPinCost's, for VMM host memory and for
	// registrations (pin per 2 MiB).
	vmm, reg pinCost
}

// pinCost is one setting of fakecuda.SetPinCost.
type pinCost struct {
	populate   bool
	pin, unpin time.Duration
}

func (*commitSuite) name() string { return "commit" }

func (c *commitSuite) open() (err error) {
	if c.pub, err = cuda.Open(0); err != nil {
		return err
	}
	if c.dev, err = icuda.Of(c.pub); err != nil {
		return errors.Join(err, c.pub.Close())
	}
	if fakecuda.IsFake(c.dev) {
		if c.fake, err = fakecuda.LoadedFake(); err != nil {
			return errors.Join(err, c.pub.Close())
		}
	}
	return nil
}

// sized sets the sizes for the run: a GiB per measurement and 4 GiB for the latency case, a
// quarter of that in quick mode, and less where the machine's free memory is short (the fake
// keeps host memory in real memory; a GPU host pins real memory).
func (c *commitSuite) sized(cfg *config) {
	if c.size != 0 {
		return // set already (a test's)
	}
	c.size, c.lat = 1<<30, 4<<30
	if cfg.quick {
		c.size, c.lat = 256<<20, 1<<30
	}
	if avail := memAvailable(); avail > 0 {
		for c.lat > 256<<20 && uint64(c.lat) > avail/3 {
			c.lat /= 2
		}
		for c.size > 128<<20 && uint64(c.size) > avail/4 {
			c.size /= 2
		}
	}
}

func (c *commitSuite) close() error { return c.pub.Close() }

func (*commitSuite) impls() []impl { return nil }

// models are the cost models measured: the driver's on a GPU, the fake's two otherwise.
func (c *commitSuite) models() []commitModel {
	if c.fake == nil {
		return []commitModel{{name: "driver"}}
	}
	populate := pinCost{populate: true}
	return []commitModel{
		{name: "populate", vmm: populate, reg: populate},
		// The H100: a VMM host granule's own time, pages and all (create + map + access, the
		// low end of 0.4–0.77 ms; unmap + release 0.2–0.4 ms); a registration faults in the
		// pages not present (here, on this machine) and then takes 8.5 ms per 128 MiB.
		{name: "h100", vmm: pinCost{pin: 400 * time.Microsecond, unpin: 200 * time.Microsecond},
			reg: pinCost{populate: true, pin: 8500 * time.Microsecond / 64}},
	}
}

// cases lists the suite's cases, each run by itself (custom).
func (c *commitSuite) cases() []benchCase {
	cs := []benchCase{{name: "commit/control", group: "commit", custom: func(s *suite) []result { return commitControl(s.cfg) }}}
	for _, m := range c.models() {
		m := m
		for _, path := range []string{"vmm-precommit", "register-span/4k", "register-span/thp", "register-precommit"} {
			name := "commit/" + path + "/" + m.name
			cs = append(cs, benchCase{name: name, group: "commit", custom: func(s *suite) []result {
				c.sized(s.cfg)
				return c.sweep(s.cfg, name, path, m)
			}})
		}
	}
	cs = append(cs,
		benchCase{name: "commit/locked", group: "commit", custom: func(s *suite) []result {
			c.sized(s.cfg)
			return c.sweep(s.cfg, "commit/locked", "locked", commitModel{name: "kernel"})
		}},
		benchCase{name: "commit/latency", group: "commit", custom: func(s *suite) []result {
			c.sized(s.cfg)
			return c.latency(s.cfg)
		}},
	)
	return cs
}

// setModel puts the fake's cost model for path in place (nothing on a GPU).
func (c *commitSuite) setModel(m commitModel, path string) {
	if c.fake != nil {
		pc := m.reg
		if strings.HasPrefix(path, "vmm") {
			pc = m.vmm
		}
		c.fake.SetPinCost(pc.populate, pc.pin, pc.unpin)
	}
}

// pinOnce pins c.size bytes once on path with w workers and returns how long pinning and
// giving the memory back took.
func (c *commitSuite) pinOnce(path string, w int) (pin, unpin time.Duration, err error) {
	var prov arena.Provider
	switch path {
	case "vmm-precommit":
		prov, err = cudamem.NewHostVMM(c.pub, cudamem.HostOptions{})
	case "register-span/4k":
		prov, err = cudamem.NewHostRegister(c.pub, cudamem.HostOptions{HostOptions: arena.HostOptions{HugePages: arena.HugeSmall}})
	case "register-span/thp", "register-precommit": // the registration provider's default
		prov, err = cudamem.NewHostRegister(c.pub, cudamem.HostOptions{})
	case "locked":
		prov = arena.LockedHost(arena.HostOptions{})
	default:
		err = fmt.Errorf("unknown path %q", path)
	}
	if err != nil {
		return 0, 0, err
	}
	a, err := arena.New(arena.Options{Provider: prov, Capacity: c.size, RegionSize: c.size, PurgeDelay: -1, CommitWorkers: w})
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	start := time.Now()
	var s arena.Span
	if strings.HasSuffix(path, "precommit") {
		var n uintptr
		if n, err = a.Precommit(c.size); err == nil && n != c.size {
			err = fmt.Errorf("precommitted %d of %d bytes", n, c.size)
		}
	} else {
		s, err = a.Alloc(c.size, arena.DefaultChunkSize)
	}
	pin = time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	start = time.Now()
	if s.N > 0 {
		if err = a.Free(s); err != nil {
			return 0, 0, err
		}
	}
	a.Trim()
	unpin = time.Since(start)
	if st := a.Stats(); st.Committed != 0 {
		return 0, 0, fmt.Errorf("%d bytes still committed after Trim", st.Committed)
	}
	return pin, unpin, nil
}

// sweep measures path at every worker count, in rounds whose order turns (as interleave
// does), and reports the median per GiB of each, and its speedup over one worker.
func (c *commitSuite) sweep(cfg *config, name, path string, m commitModel) []result {
	rs := resultSet{c: name, impl: "pinmalloc"}
	if path == "locked" {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil || (lim.Cur != unix.RLIM_INFINITY && lim.Cur < uint64(c.size) && os.Geteuid() != 0) {
			rs.fail(fmt.Errorf("skipped: RLIMIT_MEMLOCK below %d bytes", c.size))
			return rs.out
		}
	}
	c.setModel(m, path)
	defer c.setModel(commitModel{}, path)
	reps := max(3, cfg.reps)
	pins := make([][]float64, len(commitWorkers))
	unpins := make([][]float64, len(commitWorkers))
	overlap := make([]int, len(commitWorkers))
	gib := float64(c.size) / float64(1<<30)
	for round := range reps {
		for k := range commitWorkers {
			i := (k + round) % len(commitWorkers)
			runtime.GC()
			if c.fake != nil {
				c.fake.MaxInflight() // counts from here
			}
			pin, unpin, err := c.pinOnce(path, commitWorkers[i])
			if err != nil {
				rs.fail(err)
				return rs.out
			}
			if c.fake != nil {
				overlap[i] = max(overlap[i], c.fake.MaxInflight())
			}
			pins[i] = append(pins[i], float64(pin.Nanoseconds())/1e6/gib)
			unpins[i] = append(unpins[i], float64(unpin.Nanoseconds())/1e6/gib)
		}
	}
	one := median(slices.Clone(pins[0]))
	for i, w := range commitWorkers {
		ms := median(pins[i])
		rs.add(fmt.Sprintf("ms_per_gib_%dw", w), ms, "ms")
		rs.add(fmt.Sprintf("unpin_ms_per_gib_%dw", w), median(unpins[i]), "ms")
		rs.add(fmt.Sprintf("speedup_%dw", w), one/ms, "ratio")
		if c.fake != nil {
			rs.add(fmt.Sprintf("overlap_%dw", w), float64(overlap[i]), "calls")
		}
	}
	rs.add("bytes", float64(c.size), "B")
	return rs.out
}

// commitControl is the CPU-bound control (sweep.go's) at each worker count, measured together.
func commitControl(cfg *config) []result {
	var cs []contender
	for _, w := range commitWorkers {
		cs = append(cs, contender{control(w), w})
	}
	out := interleave(cfg, cs)
	rs := resultSet{c: "commit/control", impl: "control"}
	for i, w := range commitWorkers {
		if out[i].err != nil {
			rs.fail(out[i].err)
			return rs.out
		}
		rs.add(fmt.Sprintf("speedup_%dw", w), out[0].m.nsPerOp/out[i].m.nsPerOp, "ratio")
	}
	return rs.out
}

// latency measures alloc+free pairs of a CUDAHost pool, idle and while a precommit of c.lat
// bytes runs in the background, in rounds, with the fake's "populate" model (real page faults),
// and the spread of the rounds' own busy / idle ratios (round_spread, from 3 rounds). A busy
// try whose precommit ended before minBusyPairs pairs were timed gives no figure: it is taken
// again, with a new pool, up to busyTries times (busy_retakes counts them), and the case fails
// where every try of a round was that short.
func (c *commitSuite) latency(cfg *config) []result {
	rs := resultSet{c: "commit/latency", impl: "pinmalloc-pool"}
	c.setModel(commitModel{name: "populate", vmm: pinCost{populate: true}}, "vmm")
	defer c.setModel(commitModel{}, "vmm")
	ops := mixedOps()
	rounds := 3
	if cfg.quick {
		rounds = 2
	}
	// The samples' room, made before any precommit runs: made after one had started, these
	// 32 MiB waited behind it (0.4–0.6 s at load 13 on 2 CPUs, longer than the precommit of
	// the suite's test) and took the time meant for sampling.
	buf := make([]float64, 0, 1<<22)
	var idle50, idle99, busy50, busy99, firstIdle, firstBusy, perGiB, samples []float64
	retakes := 0
	for range rounds {
		p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: int(int64(c.lat) + 256<<20)})
		if err != nil {
			rs.fail(err)
			return rs.out
		}
		first, err := firstAlloc(p)
		if err == nil {
			firstIdle = append(firstIdle, first)
			var lat []float64
			lat, err = pairs(p, ops, buf[:0], 200000, nil)
			idle50, idle99 = append(idle50, pct(lat, 50)), append(idle99, pct(lat, 99))
		}
		if err = errors.Join(err, p.Close()); err != nil {
			rs.fail(err)
			return rs.out
		}
		runtime.GC()
		var b busyTry
		for try := 1; ; try++ {
			if b, err = c.busyOnce(ops, buf[:0]); err != nil || len(b.lat) >= minBusyPairs {
				break
			}
			if try == busyTries {
				err = fmt.Errorf("the precommit of %d bytes ended before %d pairs in each of %d tries (after %d in the last): too short to sample",
					c.lat, minBusyPairs, busyTries, len(b.lat))
				break
			}
			retakes++
		}
		if err != nil {
			rs.fail(err)
			return rs.out
		}
		firstBusy, perGiB = append(firstBusy, b.first), append(perGiB, b.perGiB)
		busy50, busy99 = append(busy50, pct(b.lat, 50)), append(busy99, pct(b.lat, 99))
		samples = append(samples, float64(len(b.lat)))
	}
	rs.add("idle_p50_ns", median(idle50), "ns")
	rs.add("idle_p99_ns", median(idle99), "ns")
	rs.add("busy_p50_ns", median(busy50), "ns")
	rs.add("busy_p99_ns", median(busy99), "ns")
	clock := clockCost()
	rs.add("clock_ns", clock, "ns")
	rs.add("p99_ratio", median(busy99)/median(idle99), "ratio")
	// The same without the clock's own cost, which flatters the ratio when it dominates a pair.
	rs.add("p99_ratio_net", netP99Ratio(median(busy99), median(idle99), clock), "ratio")
	if s := p99RoundSpread(busy99, idle99, clock); s > 0 { // the noise check's (noise.go)
		rs.add("round_spread", s, "ratio")
	}
	rs.add("first_alloc_idle_us", median(firstIdle)/1e3, "us")
	rs.add("first_alloc_busy_us", median(firstBusy)/1e3, "us")
	rs.add("precommit_ms_per_gib", median(perGiB), "ms")
	rs.add("busy_pairs", median(samples), "pairs")
	rs.add("busy_retakes", float64(retakes), "tries")
	rs.add("precommit_bytes", float64(c.lat), "B")
	return rs.out
}

// minBusyPairs is the fewest pairs a busy try must time for its figures to count, and
// busyTries how many tries a round takes at most to get them.
const minBusyPairs, busyTries = 1000, 3

// busyTry is one busy try's measurement: the first 1 MiB Alloc of a pool whose precommit has
// just started, the pairs timed while the precommit ran, and the precommit's time per GiB.
type busyTry struct {
	first, perGiB float64
	lat           []float64
}

// busyOnce takes one busy try on a new pool that precommits c.lat bytes, its pairs' times
// appended to lat (made beforehand: see pairs).
func (c *commitSuite) busyOnce(ops []uint32, lat []float64) (b busyTry, err error) {
	start := time.Now()
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: int(int64(c.lat) + 256<<20), Precommit: int(int64(c.lat))})
	if err != nil {
		return b, err
	}
	defer func() {
		err = errors.Join(err, p.Close())
		runtime.GC()
	}()
	if b.first, err = firstAlloc(p); err != nil {
		return b, err
	}
	if b.lat, err = pairs(p, ops, lat, 1<<62, p.PrecommitDone()); err != nil {
		return b, err
	}
	err = p.WaitPrecommit()
	b.perGiB = float64(time.Since(start).Nanoseconds()) / 1e6 / (float64(c.lat) / float64(1<<30))
	return b, err
}

// netP99Ratio is the busy p99 over the idle one, each less the clock's cost per sample (clock);
// NaN, no number, where the idle p99 is at or below that cost: nothing of it is the pair's.
func netP99Ratio(busy, idle, clock float64) float64 {
	if idle <= clock {
		return math.NaN()
	}
	return max(busy-clock, 0) / (idle - clock)
}

// p99RoundSpread is the spread (roundSpread) of the rounds' own net p99 ratios, busy[i] over
// idle[i], each less the clock's cost per sample; 0 where a round's is no number.
func p99RoundSpread(busy, idle []float64, clock float64) float64 {
	net := make([]float64, len(busy))
	for i := range busy {
		if net[i] = netP99Ratio(busy[i], idle[i], clock); math.IsNaN(net[i]) {
			return 0
		}
	}
	return roundSpread(net)
}

// firstAlloc times a pool's first 1 MiB Alloc (which commits a chunk), and frees it.
func firstAlloc(p *pinned.Pool) (float64, error) {
	start := monotonic()
	b, err := p.Alloc(1 << 20)
	ns := float64(monotonic() - start)
	if err != nil {
		return 0, err
	}
	return ns, p.Free(b)
}

// pairs runs alloc+free pairs of the sizes of ops (after a warm-up of 1000) and returns the
// time of each appended to lat: n of them or, where done is not nil, as many as begin before
// done is closed (none when it closes during the warm-up). lat's room is made by the caller
// before the work that closes done starts: pairs allocates nothing until lat is full.
func pairs(p *pinned.Pool, ops []uint32, lat []float64, n int, done <-chan struct{}) ([]float64, error) {
	mask := len(ops) - 1
	for k := range 1000 {
		if closed(done) {
			return lat, nil
		}
		b, err := p.Alloc(opSize(ops[k&mask]))
		if err != nil {
			return nil, err
		}
		if err := p.Free(b); err != nil {
			return nil, err
		}
	}
	if done != nil && busyHeldHook != nil {
		busyHeldHook(done)
	}
	for k := 0; k < n; k++ {
		if closed(done) { // every pair: one timed after the precommit's end is not a busy one
			return lat, nil
		}
		t0 := time.Now() // the vDSO clock: harness.go's monotonic is a system call here
		b, err := p.Alloc(opSize(ops[k&mask]))
		if err != nil {
			return nil, err
		}
		b[0] = 1
		if err := p.Free(b); err != nil {
			return nil, err
		}
		lat = append(lat, float64(time.Since(t0)))
	}
	return lat, nil
}

// busyHeldHook, when not nil, is called between a busy pairs' warm-up and its first timed
// pair, with its done channel (tests hold the sampler there as a loaded machine would).
var busyHeldHook func(done <-chan struct{})

// closed reports whether done is closed (never for nil).
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// clockCost is the median time of an empty interval timed as pairs times a pair: what every
// sample of pairs includes beside the pair.
func clockCost() float64 {
	xs := make([]float64, 100000)
	for i := range xs {
		t0 := time.Now()
		xs[i] = float64(time.Since(t0))
	}
	return median(xs)
}

// pct returns the q-th percentile of xs (sorted in place).
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(float64(len(xs))*q/100))]
}

// memAvailable is /proc/meminfo's MemAvailable in bytes, or 0.
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// targets: 1 GiB pinned in <= 50 ms on the H100 (the best path at the best worker count; on
// the fake the figure is the model's, so unmeasured), and the p99 of pairs during a precommit
// within 2x of idle (measured everywhere: on the fake the background work is real page faults),
// NOISY where the rounds' own ratios disagree by more than its margin (noise.go).
// A path whose case recorded an error offers no figure (as lookup takes none).
func (c *commitSuite) targets(rs []result) []target {
	best, where := 0.0, ""
	var paths [][2]string // the cases looked at, for why the target is unmeasured
	for _, r := range rs {
		if !strings.HasPrefix(r.Case, "commit/") || !strings.HasPrefix(r.Metric, "ms_per_gib_") || r.Case == "commit/locked" {
			continue
		}
		paths = append(paths, [2]string{r.Case, r.Impl})
		if r.Note == "not a number" || !(r.Value > 0) { // no figure: recorded as 0, it must not stand for "none yet"
			continue
		}
		if _, failed := failure(rs, r.Case, r.Impl); failed {
			continue
		}
		if best == 0 || r.Value < best {
			best, where = r.Value, r.Case+" "+strings.TrimPrefix(r.Metric, "ms_per_gib_")
		}
	}
	t := explained(rs, ratio("pin-1gib-ms", fmt.Sprintf("pinning 1 GiB <= %d ms on the H100 (best path and worker count)", commitTargetMsPerGiB),
		best, 1, best > 0, commitTargetMsPerGiB, true, fmt.Sprintf("%.1f ms/GiB: %s", best, where)), paths...)
	clock, _ := lookup(rs, "commit/latency", "pinmalloc-pool", "clock_ns")
	if c.fake != nil {
		t = onFakeDriver([]target{t})[0]
		t.Detail = "not measured: no GPU (the fake's cost is a model); best modelled " + t.Detail
	}
	r, ok := lookup(rs, "commit/latency", "pinmalloc-pool", "p99_ratio_net")
	i, _ := lookup(rs, "commit/latency", "pinmalloc-pool", "idle_p99_ns")
	b, _ := lookup(rs, "commit/latency", "pinmalloc-pool", "busy_p99_ns")
	n, _ := lookup(rs, "commit/latency", "pinmalloc-pool", "precommit_bytes")
	l := noiseOf(rs, ratio("pin-latency-p99", fmt.Sprintf("alloc+free p99 during a background precommit <= %dx idle", commitLatencyRatio),
		r, 1, ok, commitLatencyRatio, true, fmt.Sprintf("p99 %s busy, %s idle, %s of each the clock's; precommit of %s",
			fmtNs(b), fmtNs(i), fmtNs(clock), sizeName(int64(n)))), [2]string{"commit/latency", "pinmalloc-pool"})
	return []target{t, l}
}

// commitOnly is the -commit mode: the suite's cases alone, on device 0 of the CUDA driver or,
// where none can be loaded, on the fake driver in a re-executed process (this process then
// exits with the child's status).
func commitOnly(cfg *config) ([]benchCase, func()) {
	if code, rerun := driverOrFake("bench: -commit", "its pinning cost is a model", cfg.fake); rerun {
		os.Exit(code)
	}
	c := &commitSuite{}
	if err := c.open(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -commit:", err)
		os.Exit(1)
	}
	gpuTargets = append(gpuTargets, c.targets)
	if cfg.name == "" || strings.HasPrefix(cfg.name, "cpu-") {
		cfg.name = "commit-gpu"
		if c.fake != nil {
			cfg.name = "commit-fake"
		}
		if cfg.quick {
			cfg.name += "-quick"
		}
	}
	return c.cases(), func() {
		if err := c.close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -commit: close:", err)
		}
	}
}

// commitTargetsOnly keeps the suite's targets.
func commitTargetsOnly(ts []target) []target {
	var out []target
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "pin-") {
			out = append(out, t)
		}
	}
	return out
}

// printCommitTables writes the suite's tables, when it ran.
func printCommitTables(w io.Writer, rs []result) {
	if !ran(rs, "commit/") {
		return
	}
	var cases []string
	for _, r := range rs {
		if strings.HasPrefix(r.Case, "commit/") && r.Case != "commit/latency" && r.Case != "commit/control" && !slices.Contains(cases, r.Case) {
			cases = append(cases, r.Case)
		}
	}
	fmt.Fprintf(w, "\n### Pinning cost per GiB by commit workers (ms per GiB pinned; speedup over 1 worker; unpin = Trim's decommit)\n\n")
	head := "| case |"
	rule := "|---|"
	for _, n := range commitWorkers {
		head += fmt.Sprintf(" %dw | ×%d | unpin %dw |", n, n, n)
		rule += "---|---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	row := func(c, im string) {
		if e, ok := failure(rs, c, im); ok {
			fmt.Fprintf(w, "| %s | %s |\n", c, shorten(e))
			return
		}
		line := "| " + c + " |"
		for _, n := range commitWorkers {
			ms, _ := lookup(rs, c, im, fmt.Sprintf("ms_per_gib_%dw", n))
			up, _ := lookup(rs, c, im, fmt.Sprintf("speedup_%dw", n))
			un, _ := lookup(rs, c, im, fmt.Sprintf("unpin_ms_per_gib_%dw", n))
			line += fmt.Sprintf(" %.1f | %.2f | %.1f |", ms, up, un)
		}
		fmt.Fprintln(w, line)
	}
	for _, c := range cases {
		row(c, "pinmalloc")
	}
	if ran(rs, "commit/control") {
		line := "| CPU control (xorshift, no sharing) |"
		for _, n := range commitWorkers {
			up, _ := lookup(rs, "commit/control", "control", fmt.Sprintf("speedup_%dw", n))
			line += fmt.Sprintf(" | %.2f | |", up)
		}
		fmt.Fprintln(w, line)
	}
	if ran(rs, "commit/latency") {
		get := func(m string) float64 { v, _ := lookup(rs, "commit/latency", "pinmalloc-pool", m); return v }
		if e, ok := failure(rs, "commit/latency", "pinmalloc-pool"); ok {
			fmt.Fprintf(w, "\nlatency: %s\n", shorten(e))
			return
		}
		fmt.Fprintf(w, "\n### Alloc+free latency of a CUDAHost pool during a background precommit of %s (mixed 16 B – 8 KiB)\n\n", sizeName(int64(get("precommit_bytes"))))
		fmt.Fprintln(w, "| | p50 | p99 | first 1 MiB Alloc |")
		fmt.Fprintln(w, "|---|---|---|---|")
		fmt.Fprintf(w, "| idle pool | %s | %s | %.0f µs |\n", fmtNs(get("idle_p50_ns")), fmtNs(get("idle_p99_ns")), get("first_alloc_idle_us"))
		retaken := ""
		if n := get("busy_retakes"); n > 0 {
			retaken = fmt.Sprintf(", %.0f tries retaken: too short", n)
		}
		fmt.Fprintf(w, "| precommit running (%.0f ms/GiB, %.0f pairs%s) | %s | %s | %.0f µs |\n", get("precommit_ms_per_gib"), get("busy_pairs"), retaken,
			fmtNs(get("busy_p50_ns")), fmtNs(get("busy_p99_ns")), get("first_alloc_busy_us"))
		fmt.Fprintf(w, "\np99 busy / idle: %.2f; without the clock's %s per sample: %s\n", get("p99_ratio"), fmtNs(get("clock_ns")), fmtRatio(get("p99_ratio_net"), ""))
	}
}
