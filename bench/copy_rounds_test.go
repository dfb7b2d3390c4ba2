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
