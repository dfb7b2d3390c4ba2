package main

// The GPU check's plan (gpucheck.go): which of the suites' cases the check runs, and in which
// order, so that the figures that matter most are taken first if the deadline cuts the run short.

import (
	"regexp"
	"strings"
)

// casePriority lists the prefixes of the cases in the order the check runs them, after the
// contract tests (the tests step): copy bandwidth, then CUDA's host pool and the PyTorch-style
// cache beside the CUDAHost pool, pinning per GiB, the UVM tier's eviction, the device heap's
// pairs; then the rest, the tier's oversubscription cases (the longest) last.
var casePriority = []string{
	"cuda-h2d/", "cuda-d2h/", // copy bandwidth
	"cuda-pair/", "cuda-staging/", "cuda-setup/", "cuda-trace", // the host pool and the PyTorch-style cache
	"commit/",                  // pinning per GiB
	"uvm-move/", "uvm-managed", // uvm eviction
	"cuda-device-pair/", // device pairs
	"uvm-acquire/", "batch-calibration", "batch-", "gomaxprocs", "uvm-oversub/",
}

// caseOrder ranks a case by casePriority; managed memory's rows of the oversubscription cases
// come after the tier's.
func caseOrder(name string) int {
	for i, p := range casePriority {
		if strings.HasPrefix(name, p) {
			if strings.Contains(name, "/"+managedPolicy+"/") {
				return 2*i + 1
			}
			return 2 * i
		}
	}
	return 2 * len(casePriority)
}

// sortCases orders cases by caseOrder, keeping the suites' order within a rank.
func sortCases(cs []benchCase) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && caseOrder(cs[j].name) < caseOrder(cs[j-1].name); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// notInPlan says why the check leaves a case of the suites out, or returns "". The -uvm suite's
// oversubscription factors 1.5x and 3x are points between those the check keeps (1x, 2x, 4x),
// for the plots of bench -uvm: they would add a fifth of the suites' time.
func notInPlan(name string) string {
	if strings.HasPrefix(name, "uvm-oversub/") && (strings.HasSuffix(name, "/1.5x") || strings.HasSuffix(name, "/3x")) {
		return "between the factors the check keeps (1x, 2x, 4x): bench -uvm runs it"
	}
	return ""
}

// planCases returns the check's cases of cs, in the check's order: those that filter matches
// and the plan keeps.
func planCases(cs []benchCase, filter *regexp.Regexp) []benchCase {
	var out []benchCase
	for _, bc := range cs {
		if notInPlan(bc.name) == "" && (filter == nil || filter.MatchString(bc.name)) {
			out = append(out, bc)
		}
	}
	sortCases(out)
	return out
}

// matchAll matches every name.
var matchAll = regexp.MustCompile("")
