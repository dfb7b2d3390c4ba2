package debugpage

import (
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// A view reads a pool's or device heap's Stats once and its Usage once: a Stats walks every
// shard, and two reads within one page could disagree (the figures against the text). These
// are what it calls; the tests count the calls through them.
var (
	poolStats = (*pinned.Pool).Stats
	poolUsage = (*pinned.Pool).Usage
	heapStats = (*device.Heap).Stats
	heapUsage = (*device.Heap).Usage
)

// figures is what a view shows of a pool's or device heap's figures, from one read of its
// Stats and one of its Usage: the two, the Stats' text for people and the live buffers, and
// whether it is released (a pool or device heap closed, its memory given back: not shown).
type figures struct {
	stats, usage any
	text         string
	live         uint64
	released     bool
}
