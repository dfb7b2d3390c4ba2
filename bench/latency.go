package main

import "slices"

// latencyRounds runs a latency case's six runs, with the purge on and off in turn (run's
// argument), and adds to rs the median over each side's three runs of each of the p50, p99
// and p99.9 of Alloc times run returns, as alloc_<pct>_ns_purging and alloc_<pct>_ns_no_purge,
// and the spread of the p99 ratios of the runs taken one after the other (round_spread, the
// noise check's: noise.go). It returns what the runs counted besides (bytes or heaps purged), summed, and their errors.
func latencyRounds(rs *resultSet, run func(purge bool) ([3]float64, uint64, error)) (counted uint64, errs []error) {
	runs := map[bool][][3]float64{}
	for round := range 6 {
		purge := round%2 == 0
		q, n, err := run(purge)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		runs[purge] = append(runs[purge], q)
		counted += n
	}
	if len(errs) > 0 {
		return counted, errs
	}
	for _, purge := range []bool{true, false} {
		name := map[bool]string{true: "purging", false: "no_purge"}[purge]
		for k, pct := range []string{"p50", "p99", "p999"} {
			var vs []float64
			for _, q := range runs[purge] {
				vs = append(vs, q[k])
			}
			slices.Sort(vs)
			rs.add("alloc_"+pct+"_ns_"+name, vs[len(vs)/2], "ns")
		}
	}
	var ratios []float64 // a purging run's p99 over that of the run without a purge after it
	for i, q := range runs[true] {
		if no := runs[false][i][1]; no > 0 {
			ratios = append(ratios, q[1]/no)
		}
	}
	if s := roundSpread(ratios); s > 0 && len(ratios) == len(runs[true]) {
		rs.add("round_spread", s, "ratio")
	}
	return counted, nil
}

// percentiles sorts ns, times in nanoseconds, and returns their p50, p99 and p99.9.
func percentiles(ns []int64) [3]float64 {
	slices.Sort(ns)
	at := func(f float64) float64 { return float64(ns[min(int(f*float64(len(ns))), len(ns)-1)]) }
	return [3]float64{at(0.5), at(0.99), at(0.999)}
}
