package main

import (
	"slices"
	"strings"
)

// failedCases names, as "allocator on case", every allocator that failed on a case of the run
// (an error row), in the order of the results: the run then exits 1 (main), after its tables,
// targets and JSON, which say each error. A row left empty on purpose is no failure: a
// capability the driver lacks (lacksNote), a case the fake driver cannot run, a case skipped
// for the memlock limit.
func failedCases(rs []result) []string {
	var out []string
	for _, r := range rs {
		if r.Metric != "error" || notAFailure(r.Note) {
			continue
		}
		if name := r.Impl + " on " + r.Case; !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// notAFailure reports whether an error row's note says the row was left empty on purpose.
func notAFailure(note string) bool {
	for _, p := range []string{lacksNote, "not measured on the fake driver", "skipped: "} {
		if strings.HasPrefix(note, p) {
			return true
		}
	}
	return false
}
