package main

import (
	"fmt"
	"io"
	"strings"
)

// The copy engine's calibration as the batch suite reports it (batch_cuda.go): per cell of a
// block size and a batch length, case "calibration/SIZExCOUNT", the bandwidth of each method
// under its impl name and the method chosen under calibrationChosen (its name in the note).

// calibrationChosen is the impl under which a cell's choice is recorded.
const calibrationChosen = "chosen"

// calibrationCase names the case of a cell.
func calibrationCase(size, count int) string {
	return fmt.Sprintf("calibration/%sx%d", sizeName(int64(size)), count)
}

// printCalibration writes the calibration's table, when the run has one.
func printCalibration(w io.Writer, rs []result) {
	if !ran(rs, "calibration/") {
		if e, ok := failure(rs, "batch-calibration", "pinmalloc-auto"); ok {
			fmt.Fprintf(w, "\ncopy engine calibration: %s\n", e)
		}
		return
	}
	took, _ := lookup(rs, "batch-calibration", "pinmalloc-auto", "took_ms")
	fmt.Fprintf(w, "\n### Copy engine calibration (copyengine.Batcher, MethodAuto; %.0f ms): GB/s to the device and back, the fastest chosen\n\n", took)
	fmt.Fprintln(w, "| cell (block x batch) | timed with | kernel | batch-api | per-copy | chosen |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rs {
		if r.Impl != calibrationChosen || r.Metric != "method" {
			continue
		}
		jobs, _ := lookup(rs, r.Case, calibrationChosen, "jobs_timed")
		cells := []string{strings.TrimPrefix(r.Case, "calibration/"), fmt.Sprintf("%.0f jobs", jobs)}
		for _, m := range []string{"pinmalloc-kernel", "cuda-batch-api", "cuda-per-copy"} {
			if v, ok := lookup(rs, r.Case, m, "gbps"); ok {
				cells = append(cells, fmt.Sprintf("%.2f", v))
			} else {
				cells = append(cells, "–")
			}
		}
		fmt.Fprintf(w, "| %s | **%s** |\n", strings.Join(cells, " | "), r.Note)
	}
}
