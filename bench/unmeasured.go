package main

import (
	"slices"
	"strings"
)

// notMeasured is the detail of a target whose cases this run left out (-cases, or a suite run
// alone): printTargets counts those in one line.
const notMeasured = "not measured in this run"

// whyUnmeasured says why a target whose figures (used: case and allocator) were looked up is
// UNMEASURED: an allocator that failed on a case, one that did not run at all (not found,
// skipped, or left out by -impls), or, when only cases left out explain it, notMeasured.
func whyUnmeasured(rs []result, used map[[2]string]bool) string {
	keys := make([][2]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1])
	})
	ran := map[string]bool{}  // cases with any result
	took := map[string]bool{} // allocators with any result
	for _, r := range rs {
		ran[r.Case] = true
		took[r.Impl] = true
	}
	var why []string
	for _, k := range keys {
		c, im := k[0], k[1]
		var w string
		switch e, failed := failure(rs, c, im); {
		case !ran[c]:
			continue
		case failed:
			w = im + " failed on " + c + ": " + e
		case !took[im]:
			w = im + " did not run (not found, skipped or left out by -impls: " +
				"the allocators line says which)"
		case !hasResult(rs, c, im):
			w = im + " has no figure on " + c
		default:
			continue
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	if len(why) == 0 {
		return notMeasured
	}
	return "not measured: " + strings.Join(why, "; ")
}

// hasResult reports whether the run recorded anything for allocator im on case c.
func hasResult(rs []result, c, im string) bool {
	for _, r := range rs {
		if r.Case == c && r.Impl == im {
			return true
		}
	}
	return false
}

// explained is t, its detail saying why it is unmeasured (whyUnmeasured) from the figures of
// keys (case and allocator), for the targets built outside evaluateTargets' get.
func explained(rs []result, t target, keys ...[2]string) target {
	if t.Status != unmeasured || t.Detail != notMeasured {
		return t
	}
	used := map[[2]string]bool{}
	for _, k := range keys {
		used[k] = true
	}
	t.Detail = whyUnmeasured(rs, used)
	return t
}
