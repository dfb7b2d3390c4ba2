// Package hostuse tells the allocator that owns a piece of host memory that a CUDA stream uses
// it, so that the memory is not handed out again before the stream has passed that use.
//
// Code that queues asynchronous work on host memory it was given (device.Heap's HtoDAsync and
// DtoHAsync) calls Record with the host range and the stream. Each registered Owner (a
// pinned.Pool whose memory the driver copies asynchronously) checks whether the range is its
// memory and, if so, records the stream on the buffer that holds it; a later free of that
// buffer then waits for the stream. Memory no Owner claims is the caller's business: Go memory
// is pinned for the call by the caller, since the driver copies pageable memory before the call
// returns.
//
// An Owner orders reuse after streams of one CUDA context (its device's primary context): it
// can wait for no other. A stream of another context (a GPU the pool's memory is granted to, not
// the pool's own) is answered with ErrOtherContext, and the caller then makes its work on the
// buffer synchronous (it waits for the stream before it returns).
//
// The owners are few (a pool or two per device), so Record asks each in turn; an Owner answers
// a range outside its memory with one lock-free lookup. Registration copies the list, so Record
// takes no lock.
package hostuse

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrOtherContext is an Owner's answer for a stream of a context it does not order reuse
// after: the caller must wait for the stream before the buffer may be freed.
var ErrOtherContext = errors.New("hostuse: stream of another context")

// Owner is an allocator of host memory that orders the reuse of its buffers after the streams
// that use them.
type Owner interface {
	// RecordStream reports whether [addr, addr+n) is the owner's memory and, if it is, records
	// stream s, of CUDA context ctx, on the buffer that holds it. err says why a range of its
	// memory could not be recorded: it is not inside one live buffer, the stream is refused, or
	// it is of another context (ErrOtherContext).
	RecordStream(addr, n, s, ctx uintptr) (mine bool, err error)
}

var (
	mu     sync.Mutex
	owners atomic.Pointer[[]Owner]
)

// Register adds o to the owners Record asks.
func Register(o Owner) {
	mu.Lock()
	defer mu.Unlock()
	var l []Owner
	if old := owners.Load(); old != nil {
		l = slices.Clone(*old)
	}
	l = append(l, o)
	owners.Store(&l)
}

// Unregister removes o, registered before, from the owners.
func Unregister(o Owner) {
	mu.Lock()
	defer mu.Unlock()
	if old := owners.Load(); old != nil {
		l := slices.DeleteFunc(slices.Clone(*old), func(x Owner) bool { return x == o })
		owners.Store(&l)
	}
}

// Record records stream s, of CUDA context ctx, on the buffer of the owner whose memory holds
// [addr, addr+n), and reports whether one does.
func Record(addr, n, s, ctx uintptr) (owned bool, err error) {
	l := owners.Load()
	if l == nil || n == 0 {
		return false, nil
	}
	for _, o := range *l {
		if mine, err := o.RecordStream(addr, n, s, ctx); mine {
			return true, err
		}
	}
	return false, nil
}
