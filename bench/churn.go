package main

import (
	"errors"
	"fmt"
	"time"
)

// The churn cases keep many blocks live, the way a cache or a server's in-flight buffers do,
// where the pair and mixed cases keep at most 1024: each operation frees a live block drawn
// at random and allocates its replacement. From some 10^5 live blocks on, the blocks and the
// allocator's metadata outgrow the CPU's caches and a free finds them cold. The random
// sequence is the same for every allocator, Go or C (cloops.h draws it the same way), and
// every run starts it again.

// churnSize is the block size of the churn cases.
const churnSize = 64

// churnLives lists the live-block counts of the churn cases; the default run stops at
// defaultMaxLive (-maxlive raises it: 1e7 blocks take up to a minute more and 3.5 GB
// resident over all the allocators, which hold their blocks at once).
var churnLives = []int{1e4, 1e5, 1e6, 1e7}

const defaultMaxLive = 1e6

// churnSeed offsets the slot sequence (BENCH_CHURN_SEED in cloops.h).
const churnSeed = 0x636875726e5f6f70 // "churn_op"

// churnSlot draws the slot, below live, of the i-th operation of a churn run: the i-th output
// of splitmix64, scaled. Each draw depends on i alone, not on the one before, so the CPU
// computes it beside the allocator's work and the null allocators' loops are not held up by a
// chain of arithmetic that an allocator's loop would hide. bench_churn_slot in cloops.h is the
// same function.
func churnSlot(i, live uint64) uint64 {
	z := churnSeed + i*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return (z >> 32) * live >> 32
}

// churnCapacity is a pool capacity that holds live blocks of size bytes with room to spare.
func churnCapacity(live, size int) int64 { return 4 * int64(live) * int64(size) }

// churnCases returns a churn case for each count of live blocks up to maxLive.
func churnCases(maxLive int) []benchCase {
	var cs []benchCase
	for _, l := range churnLives {
		if l <= maxLive {
			cs = append(cs, benchCase{name: "churn/" + countName(l), group: "churn", size: churnSize, live: l})
		}
	}
	return cs
}

// countName writes a count the way case names do: 10k, 1M.
func countName(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}

// openChurn allocates live blocks of size bytes from a and returns the churn workload over
// them; closing it frees them and closes a. A failure (pinmalloc's says when the memlock limit
// is the cause, and how to raise it) frees what was allocated.
func openChurn[H any](a allocator[H], live, size int) (workload, error) {
	slots := make([]H, 0, live)
	release := func() error {
		var err error
		for _, h := range slots {
			firstErr(&err, a.free(h))
		}
		return errors.Join(err, a.close())
	}
	for range live {
		h, err := a.alloc(size)
		if err != nil {
			err = fmt.Errorf("allocating %d live blocks of %d B (%d done): %w", live, size, len(slots), err)
			return workload{}, errors.Join(err, release())
		}
		a.touch(h)
		slots = append(slots, h)
	}
	return workload{run: func(n int) (time.Duration, error) {
		return churnLoop(a, &slots, size, n)
	}, close: release}, nil
}

// churnLoop n times frees the block in a slot drawn by churnSlot and allocates a replacement
// of size bytes into it, touching it. A failed allocation leaves its slot out of *slots (the
// last slot takes its place), so that every block left there is live.
func churnLoop[H any](a allocator[H], slots *[]H, size, n int) (time.Duration, error) {
	s := *slots
	live := uint64(len(s))
	t0 := time.Now()
	for k := range uint64(n) {
		i := churnSlot(k, live)
		if err := a.free(s[i]); err != nil {
			return 0, err
		}
		h, err := a.alloc(size)
		if err != nil {
			s[i] = s[len(s)-1]
			*slots = s[:len(s)-1]
			return 0, err
		}
		a.touch(h)
		s[i] = h
	}
	return time.Since(t0), nil
}
