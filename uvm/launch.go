package uvm

import "github.com/pinmalloc/pinmalloc/cuda"

// Launches: a batch's copies (a restore's, an eviction's) are handed to the Mover a launch at a
// time while the batch is built, so that the device copies the first blocks of a large batch
// while the CPU prepares the rest. A launcher holds the copies not queued yet and sizes the
// launches.

// launchJobs is how many copies a batch gathers before it queues them (a 64 MiB batch of 4 KiB
// blocks is 16,384 jobs). The first launches of a batch are smaller, firstLaunchJobs then twice
// as many each time up to launchJobs, so that the device starts sooner: nothing overlaps the
// preparation of the first launch (1024 jobs at about 25 ns each: 25 µs, where the kernel's
// 50 GB/s leaves a 64 MiB batch of 4 KiB blocks about 60 µs of slack to reach 48 GB/s,
// measured on an H100), and a 128-job launch is 10 µs of copying there, time enough for the CPU
// to prepare the next 256 jobs. Prefetch checks its handles in chunks of the same sizes.
const (
	launchJobs      = 1024
	firstLaunchJobs = 128
)

// nextLaunch returns the size of the launch after one of n jobs.
func nextLaunch(n int) int { return min(2*n, launchJobs) }

// launcher holds a batch's copies until a launch is due.
type launcher struct {
	jobs   []CopyJob // copies not queued yet
	size   int       // the length of the next launch
	queued int       // copies the Mover queued
	tried  bool      // a launch was asked for: the Mover may have queued copies even if it failed
}

// newLauncher returns a launcher that keeps its jobs in scratch.
func newLauncher(scratch []CopyJob) launcher {
	return launcher{jobs: scratch[:0], size: firstLaunchJobs}
}

// add adds a copy and reports whether a launch is due.
func (l *launcher) add(j CopyJob) bool {
	l.jobs = append(l.jobs, j)
	return len(l.jobs) == l.size
}

// launch queues the copies of l not queued yet on s (none: it does nothing). t.mu is held.
func (t *Tier) launch(l *launcher, s cuda.Stream) error {
	if len(l.jobs) == 0 {
		return nil
	}
	l.tried = true
	if err := t.engine.mover.Copy(l.jobs, s); err != nil {
		return err
	}
	l.queued += len(l.jobs)
	l.jobs, l.size = l.jobs[:0], nextLaunch(l.size)
	return nil
}
