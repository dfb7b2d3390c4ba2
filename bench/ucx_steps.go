package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The UCX suite's steps (ucx.go): each measures some of its rows; a step that fails is
// recorded, as a row with its error, and the steps after it still run (one transport or
// competitor failing loses only its own figures). A step still running at its time limit
// (-ucx-step-limit: a peer or a perftest that hangs) fails so, timed out.

// ucxStep is one step of the UCX suite: the cases it measures (-cases selects the step by
// them; its failure's row is named by those selected) and the function that measures them,
// which returns soon after its ctx ends.
type ucxStep struct {
	cases []string
	run   func(ctx context.Context) ([]ucxRow, error)
}

// ucxStepLimit is a step's time limit unless -ucx-step-limit says: a minute a round, and one
// more (a step takes seconds a round on a quiet host; a run's rounds are measured as they come,
// so a host busy with other work slows them all, not one step).
func ucxStepLimit(rounds int) time.Duration { return time.Duration(rounds+1) * time.Minute }

// steps returns the suite's steps, in the order run: the registration, the bandwidth of each
// size (its puts and gets), the batch.
func (b *ucxBenchState) steps() []ucxStep {
	steps := []ucxStep{{cases: []string{"registration/1000x16KiB"}, run: b.registration}}
	for _, size := range ucxSizes {
		name := sizeName(int64(size))
		steps = append(steps, ucxStep{
			cases: []string{opName(false) + "/" + name, opName(true) + "/" + name},
			run:   func(ctx context.Context) ([]ucxRow, error) { return b.bandwidth(ctx, size) },
		})
	}
	batch := []string{"batch/1000x16KiB", "cpu/1000x16KiB-vs-net"}
	return append(steps, ucxStep{cases: batch, run: b.batch})
}

// runUCXSteps runs, in order, the steps whose cases filter selects, each with a ctx of ctx
// that ends limit after it starts, and returns their rows and the names of the steps that
// failed. A step that fails leaves one row, named by its selected cases, with its error (and no
// figures); one that ran into its limit says it timed out.
func runUCXSteps(ctx context.Context, filter *regexp.Regexp, steps []ucxStep, limit time.Duration) (
	rows []ucxRow, failed []string) {
	for _, step := range steps {
		sel := slices.DeleteFunc(slices.Clone(step.cases), func(c string) bool {
			return !filter.MatchString(c)
		})
		if len(sel) == 0 {
			continue
		}
		stepCtx, cancel := context.WithTimeout(ctx, limit)
		rs, err := step.run(stepCtx)
		if err != nil && errors.Is(stepCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("timed out after %v: %w", limit, err)
		}
		cancel()
		if err != nil {
			name := strings.Join(sel, ", ")
			rows, failed = append(rows, ucxRow{Case: name, Error: err.Error()}), append(failed, name)
			continue
		}
		rows = append(rows, rs...)
	}
	return rows, failed
}
