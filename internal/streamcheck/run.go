package streamcheck

import (
	"fmt"
	"runtime/debug"

	"sort"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/copyengine"
)

// Result is what a run did.
type Result struct {
	Ops     []Op     // the operations applied, in order
	Failure *Failure // nil when the run passed
	Counts  map[string]int
	Checked int64 // bytes compared with the model at synchronizes
}

// Summary is a line of the result's figures.
func (r Result) Summary() string {
	kinds := map[Kind]int{}
	for _, op := range r.Ops {
		kinds[op.Kind]++
	}
	var parts []string
	for k := Kind(0); k < numKinds; k++ {
		if kinds[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
		}
	}
	var refusals []string
	for k, n := range r.Counts {
		refusals = append(refusals, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(refusals)
	return fmt.Sprintf("%d operations (%s); %d MiB compared; legitimate refusals: %s",
		len(r.Ops), strings.Join(parts, ", "), r.Checked>>20, strings.Join(refusals, ", "))
}

// Generate runs steps operations drawn from cfg's seed on a fresh heap, pool and tier over
// rig, then the final checks, and returns what it applied and the first failure.
func Generate(rig Rig, cfg Config, steps int) Result {
	return run(rig, cfg, steps, nil)
}

// Replay runs ops (operations that do not apply are skipped) on a fresh heap, pool and tier,
// then the final checks.
func Replay(rig Rig, cfg Config, ops []Op) Result {
	return run(rig, cfg, 0, ops)
}

func run(rig Rig, cfg Config, steps int, ops []Op) Result {
	w, err := newWorld(cfg, rig)
	if err != nil {
		return Result{Failure: &Failure{Op: Op{Kind: numKinds}, What: "setup", Msg: err.Error()}}
	}
	var res Result
	var r = newRand(cfg.Seed, 2)
	n := len(ops)
	if ops == nil {
		n = steps
	}
	for i := range n {
		var op Op
		if ops == nil {
			op = w.gen(r, i)
		} else {
			op = ops[i]
		}
		applied, f := w.safely(op)
		if applied {
			res.Ops = append(res.Ops, op)
		}
		if f != nil {
			f.Step, f.Op = len(res.Ops)-1, op
			res.Failure = f
			break
		}
	}
	if res.Failure == nil {
		if _, f := w.safely(Op{ID: -1, Kind: numKinds}); f != nil {
			f.Step, f.Op = len(res.Ops), Op{ID: -1, Kind: numKinds}
			res.Failure = f
		}
	}
	if f := w.abandonSafely(); f != nil && res.Failure == nil {
		res.Failure = f
	}
	res.Counts, res.Checked = w.counts, w.checkedBytes
	return res
}

// safely applies op (the final checks for Kind numKinds), turning a panic of the system under
// test into a failure of its own class, so that a run reports it, a shrink replays it like any
// other failure, and later seeds still run.
func (w *world) safely(op Op) (applied bool, f *Failure) {
	defer func() {
		if v := recover(); v != nil {
			applied, f = true, failf("panic", "%v\n%s", v, debug.Stack())
		}
	}()
	if op.Kind == numKinds {
		return true, w.finish()
	}
	return w.apply(op)
}

// abandonSafely is abandon, with a panic turned into a failure (the state a failure left may
// not be one the libraries expect, but a teardown must never stop the run).
func (w *world) abandonSafely() (f *Failure) {
	defer func() {
		if v := recover(); v != nil {
			f = failf("panic in the teardown", "%v\n%s", v, debug.Stack())
		}
	}()
	w.abandon()
	return nil
}

// Shrink looks for a shorter sequence than ops that fails the way f did (the same What), by
// delta debugging (ddmin): it replays ops without one of n chunks at a time, keeps the first
// that still fails, and refines the chunks until no single operation can go, or until budget
// has passed. It returns the shortest failing sequence found, its failure and how many
// replays it ran.
func Shrink(rig Rig, cfg Config, ops []Op, f *Failure, budget time.Duration) ([]Op, *Failure, int) {
	deadline := time.Now().Add(budget)
	replays := 0
	// fails replays cand and returns, when it fails as f did, the operations it applied up to
	// the failure.
	fails := func(cand []Op) ([]Op, *Failure) {
		replays++
		res := Replay(rig, cfg, cand)
		if res.Failure != nil && res.Failure.What == f.What {
			return res.Ops[:min(res.Failure.Step+1, len(res.Ops))], res.Failure
		}
		return nil, nil
	}
	if f.Step+1 < len(ops) { // the operations after the failure played no part
		if got, g := fails(ops[:f.Step+1]); g != nil {
			ops, f = got, g
		}
	}
	// Whole kinds of operation first (every Stats, every PoolStamp, ...), commonest first: a
	// coarse pass that keeps the state the failure needs more often than cutting the sequence
	// in halves does.
	for _, k := range kindsByCount(ops) {
		if !time.Now().Before(deadline) {
			break
		}
		var cand []Op
		for _, op := range ops {
			if op.Kind != k {
				cand = append(cand, op)
			}
		}
		if len(cand) == len(ops) || len(cand) == 0 {
			continue
		}
		if got, g := fails(cand); g != nil {
			ops, f = got, g
		}
	}
	// A failure usually needs a few operations shortly before it: try the last 16, 32, 64, ...
	// operations alone first (operations on objects made before the cut are skipped), short
	// replays that often cut thousands of operations at once.
	for keep := 16; keep < len(ops) && time.Now().Before(deadline); keep *= 2 {
		if got, g := fails(ops[len(ops)-keep:]); g != nil {
			ops, f = got, g
			break
		}
	}
	for n := 2; len(ops) >= 2 && time.Now().Before(deadline); {
		chunk := (len(ops) + n - 1) / n
		reduced := false
		for i := 0; i*chunk < len(ops) && time.Now().Before(deadline); i++ {
			lo, hi := i*chunk, min((i+1)*chunk, len(ops))
			cand := append(append([]Op(nil), ops[:lo]...), ops[hi:]...)
			if got, g := fails(cand); g != nil {
				ops, f, reduced = got, g, true
				break
			}
		}
		switch {
		case reduced:
			n = max(n-1, 2)
		case chunk == 1:
			return ops, f, replays
		default:
			n = min(2*n, len(ops))
		}
	}
	return ops, f, replays
}

// Listing is ops as a readable list, one operation a line.
func Listing(ops []Op) string {
	var b strings.Builder
	for _, op := range ops {
		b.WriteString("\t")
		b.WriteString(op.String())
		b.WriteString("\n")
	}
	return b.String()
}

var methodName = map[copyengine.Method]string{copyengine.MethodAuto: "MethodAuto", copyengine.MethodKernel: "MethodKernel",
	copyengine.MethodBatchAPI: "MethodBatchAPI", copyengine.MethodPerCopy: "MethodPerCopy"}

// GoCode is a failing sequence as Go source: a regression case for regressions_test.go.
func GoCode(name string, cfg Config, ops []Op, what string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tname: %q,\n\twhat: %q,\n", name, what)
	fmt.Fprintf(&b, "\tcfg: Config{Seed: %d, Streams: %d, Blocking: %#b, Legacy: %v, Pressure: %v, DeviceCapacity: %d << 20, DeviceZero: %v, DeviceQuota: %d, PoolZero: %v, PoolQuota: %d, PoolShards: %d, TierBudget: %d << 10, TierHostQuota: %d, Mover: copyengine.%s, PurgeDelay: %d},\n",
		cfg.Seed, cfg.Streams, cfg.Blocking, cfg.Legacy, cfg.Pressure, cfg.DeviceCapacity>>20, cfg.DeviceZero, cfg.DeviceQuota, cfg.PoolZero, cfg.PoolQuota, cfg.PoolShards, cfg.TierBudget>>10, cfg.TierHostQuota, methodName[cfg.Mover], cfg.PurgeDelay)
	b.WriteString("\tops: []Op{\n")
	for _, op := range ops {
		fmt.Fprintf(&b, "\t\t{ID: %d, Kind: %s, S: %d, T: %d, A: %d, B: %d, N: %d, Off: %d, V: %#x, Flag: %v},\n",
			op.ID, op.Kind, op.S, op.T, op.A, op.B, op.N, op.Off, op.V, op.Flag)
	}
	b.WriteString("\t},\n}")
	return b.String()
}

// kindsByCount is the kinds of operation in ops, commonest first.
func kindsByCount(ops []Op) []Kind {
	var n [numKinds + 1]int
	for _, op := range ops {
		n[op.Kind]++
	}
	var ks []Kind
	for k := Kind(0); k < numKinds; k++ {
		if n[k] > 0 {
			ks = append(ks, k)
		}
	}
	sort.SliceStable(ks, func(i, j int) bool { return n[ks[i]] > n[ks[j]] })
	return ks
}
