package remote

import (
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// localHold is the hold of local memory UCX may read or write for an operation: a pool's
// buffer (pinned.Pool.Hold: a transfer's Put or Get, an answer to a peer's get) or a device
// heap's block (device.Heap.Hold: a transfer's PutDevice or GetDevice). Either way a free of
// the memory meanwhile takes effect at the last Release, so that it is never handed out again
// while UCX may touch it. The zero localHold holds nothing.
type localHold struct {
	buf pinned.Hold
	dev device.Hold
}

// Release releases the hold.
func (h localHold) Release() error {
	if h.dev != (device.Hold{}) {
		return h.dev.Release()
	}
	return h.buf.Release()
}
