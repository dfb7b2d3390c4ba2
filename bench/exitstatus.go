package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// exitStatus returns the suite's exit status once its tables, targets and JSON are out: 1 when
// an allocator failed on a case (failedCases) or, under -strict, a target was MISSED (one
// NOISY, UNMEASURED or N/A is not), each named on errOut; else 0. Without -strict a MISSED
// target does not fail the run: a machine may be unable to meet one (CI's unprivileged run,
// under an 8 MiB memlock limit), which the target's "why" says.
func exitStatus(errOut io.Writer, cfg *config, rs []result, ts []target) int {
	status := 0
	w := newFitWriter(errOut, cfg.width())
	defer w.Flush()
	if failed := failedCases(rs); len(failed) > 0 {
		fmt.Fprintf(w, "bench: %d allocator runs failed (the tables say why): %s\n",
			len(failed), strings.Join(failed, ", "))
		status = 1
	}
	if cfg.strict {
		if names := missedTargets(ts); len(names) > 0 {
			fmt.Fprintf(w, "bench: -strict: %d targets MISSED (the targets say why): %s\n",
				len(names), strings.Join(names, ", "))
			status = 1
		}
	}
	return status
}

// missedTargets names the targets of ts that read MISSED, in their order.
func missedTargets(ts []target) []string {
	var out []string
	for _, t := range ts {
		if t.Status == missed {
			out = append(out, t.Name)
		}
	}
	return out
}

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
