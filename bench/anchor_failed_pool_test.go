package main

import (
	"strings"
	"testing"
)

// TestAnchorFailedPoolUnmeasured: the anchors' targets compare the pool with the stronger of
// CUDA's two host pools; where one of them ran and failed (an error that is not a capability the
// driver lacks) or left a figure that is no measurement, the stronger is unknown, and the target
// is UNMEASURED, naming it, never MET against the other alone. It read MET at 20x against
// cuda-hostpool-host while cuda-hostpool, at the device's NUMA node, had failed.
func TestAnchorFailedPoolUnmeasured(t *testing.T) {
	const c = "cuda-pair/4KiB"
	base := []result{
		{Case: c, Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: c, Impl: hostPoolHostName, Metric: "ns_per_pair", Value: 2000},
	}
	for _, tc := range []struct {
		name string
		row  *result
		want string
	}{
		{"failed", &result{Case: c, Impl: hostPoolName, Metric: "error", Note: "cuMemPoolCreate: CUDA_ERROR_OUT_OF_MEMORY"}, unmeasured},
		{"zero", &result{Case: c, Impl: hostPoolName, Metric: "ns_per_pair", Value: 0}, unmeasured},
		{"not a number", &result{Case: c, Impl: hostPoolName, Metric: "ns_per_pair", Note: "not a number"}, unmeasured},
		{"lacked", &result{Case: c, Impl: hostPoolName, Metric: "error", Note: noHostPools + " at the HOST_NUMA location (device attribute 142 is 0)"}, met},
		{"not run", nil, met},
	} {
		rs := base
		if tc.row != nil {
			rs = append(append([]result(nil), base...), *tc.row)
		}
		for _, tg := range anchorTargets(rs) {
			if tg.Name != "pool-vs-cuda-hostpool/4KiB" {
				continue
			}
			if tg.Status != tc.want || (tc.want == unmeasured && !strings.Contains(tg.Detail, hostPoolName)) {
				t.Errorf("%s %s beside %s at 2 µs: %s ratio %g (%s), want %s", hostPoolName, tc.name, hostPoolHostName, tg.Status, tg.Ratio, tg.Detail, tc.want)
			}
		}
	}
}
