//go:build pinmalloc_noprocpin

package procpin

import (
	"sync"
	"sync/atomic"
)

var (
	ids  sync.Pool // of *int: sync.Pool keeps one per P
	next atomic.Int64
)

// ID returns a number that the goroutines of one P tend to share: one a sync.Pool keeps per
// P, numbered from 0 as they are first made. Unlike the linkname build's, it may exceed
// GOMAXPROCS-1 (a garbage collection empties the pool), so callers reduce it modulo their
// table.
func ID() int {
	v, _ := ids.Get().(*int)
	if v == nil {
		v = new(int)
		*v = int(next.Add(1) - 1)
	}
	ids.Put(v)
	return *v
}

// Exact is false in this build: ID is a hint that several Ps may share.
const Exact = false

// Pin returns ID: this build cannot pin, so a caller that needs a P of its own checks Exact.
func Pin() int { return ID() }

// Unpin does nothing in this build.
func Unpin() {}
