package main

import (
	"regexp"
	"slices"
	"strings"
)

// The UCX suite's steps (ucx.go): each measures some of its rows; a step that fails is
// recorded, as a row with its error, and the steps after it still run (one transport or
// competitor failing loses only its own figures).

// ucxStep is one step of the UCX suite: the cases it measures (-cases selects the step by
// them; its failure's row is named by those selected) and the function that measures them.
type ucxStep struct {
	cases []string
	run   func() ([]ucxRow, error)
}

// steps returns the suite's steps, in the order run: the registration, the bandwidth of each
// size (its puts and gets), the batch.
func (b *ucxBenchState) steps() []ucxStep {
	steps := []ucxStep{{cases: []string{"registration/1000x16KiB"}, run: b.registration}}
	for _, size := range ucxSizes {
		name := sizeName(int64(size))
		steps = append(steps, ucxStep{
			cases: []string{opName(false) + "/" + name, opName(true) + "/" + name},
			run:   func() ([]ucxRow, error) { return b.bandwidth(size) },
		})
	}
	batch := []string{"batch/1000x16KiB", "cpu/1000x16KiB-vs-net"}
	return append(steps, ucxStep{cases: batch, run: b.batch})
}

// runUCXSteps runs, in order, the steps whose cases filter selects, and returns their rows
// and the names of the steps that failed. A step that fails leaves one row, named by its
// selected cases, with its error (and no figures).
func runUCXSteps(filter *regexp.Regexp, steps []ucxStep) (rows []ucxRow, failed []string) {
	for _, step := range steps {
		sel := slices.DeleteFunc(slices.Clone(step.cases), func(c string) bool {
			return !filter.MatchString(c)
		})
		if len(sel) == 0 {
			continue
		}
		rs, err := step.run()
		if err != nil {
			name := strings.Join(sel, ", ")
			rows, failed = append(rows, ucxRow{Case: name, Error: err.Error()}), append(failed, name)
			continue
		}
		rows = append(rows, rs...)
	}
	return rows, failed
}
