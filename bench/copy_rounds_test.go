//go:build cgo && linux

package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCopyCaseInRounds: the copy-bandwidth cases (pool-h2d-vs-hostpool, cuda copies at 0.95 of
// cuMemHostAlloc's) time their sources in rounds, interleaved (interleave), as every other
// target's figures are, not one source's repetitions after another's: each source's figure
// comes with the spread of its rounds.
func TestCopyCaseInRounds(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	c := &cudaSuite{}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	var srcs []hostSource
	for _, name := range []string{"a", "b"} {
		srcs = append(srcs, hostSource{name, func(int64) (allocator[[]byte], error) {
			return cudaHostAlloc{c.dev}, nil
		}})
	}
	cfg := &config{target: 2 * time.Millisecond, reps: 5, implFilter: regexp.MustCompile("")}
	s := &suite{cfg: cfg}
	bc := c.copyCase("cuda-h2d/64KiB", "h2d", 64<<10, srcs)
	rs := bc.custom(s)
	for _, src := range srcs {
		if e, failed := failure(rs, bc.name, src.name); failed {
			t.Fatalf("%s: %s", src.name, e)
		}
		if v, ok := lookup(rs, bc.name, src.name, "gbps"); !ok || v <= 0 {
			t.Errorf("%s: no bandwidth: %v", src.name, rs)
		}
		if _, ok := lookup(rs, bc.name, src.name, "round_spread"); !ok {
			t.Errorf("%s: no spread of rounds: measured one source after another? %v", src.name, rs)
		}
	}
}

// TestBatchCaseInRounds: the copy engine's cases (kernel-vs-per-copy at 10x) time their
// methods in rounds, interleaved, not one method's repetitions after another's: each method's
// figure comes with the spread of its rounds.
func TestBatchCaseInRounds(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	c := &batchSuite{}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	cfg := &config{target: 2 * time.Millisecond, reps: 5,
		implFilter: regexp.MustCompile("kernel|per-copy")}
	var bc benchCase
	for _, x := range c.cases() {
		if x.name == "batch-h2d/64KiB" {
			bc = x
		}
	}
	if bc.custom == nil {
		t.Fatal("no case batch-h2d/64KiB")
	}
	rs := bc.custom(&suite{cfg: cfg})
	for _, im := range []string{"pinmalloc-kernel", "cuda-per-copy"} {
		if e, failed := failure(rs, bc.name, im); failed {
			t.Fatalf("%s: %s", im, e)
		}
		if _, ok := lookup(rs, bc.name, im, "round_spread"); !ok {
			t.Errorf("%s: no spread of rounds: measured one method after another? %v", im, rs)
		}
	}
}
