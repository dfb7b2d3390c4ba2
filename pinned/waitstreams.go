package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// WaitStreams waits until every CUDA stream recorded on the buffer that holds b (RecordStream,
// device.Heap's async copies) has passed the work queued on it so far: what a reader or writer
// of the buffer outside CUDA's streams (a network transfer of package remote) needs first. It
// returns at once for a buffer no stream was recorded on (or only streams forgotten since:
// ForgetStream), and in a pool whose copies are synchronous (any backend but CUDAHost), once it
// has checked b. A ForgetStream of one of its streams waits for the WaitStreams in progress, so
// that it, and the stream's destroy after it, never lands between a WaitStreams' look at the
// stream and its wait. A stream destroyed without ForgetStream whose handle a reclaim found
// refused is waited for by a synchronize of the context, as the reclaims wait for it: the
// driver may have given its handle to a new stream since, whose work is not the destroyed
// one's. Errors: b not in a live buffer of the pool (ErrNotOwned), a buffer the caller has
// freed, its free done or still waiting for its streams or holds (ErrDoubleFree), a stream the
// driver refuses (ErrInvalidStream; when it refused the handle, the buffers deferred on that
// stream wait for a synchronize of the context from then on, as if a reclaim had found it so),
// an event the driver cannot make for the point a wait on the legacy stream records (ErrRefused,
// ErrOutOfMemory when memory ran out: the stream was not asked, and nothing waited for), a stream
// capturing a CUDA graph, which no wait may touch, or, for a destroyed stream found
// refused, a capture on any stream the pool knows, which the synchronize of the context would
// end (matching cuda.ErrCapturing only: wait again once the capture has ended), a released
// pool (ErrClosed).
func (p *Pool) WaitStreams(b []byte) error {
	base, err := p.unfreed(b)
	if err != nil || p.order == nil {
		return err
	}
	return p.order.waitStreams(base)
}

// waitStreams synchronizes the streams recorded on the live buffer at base.
func (o *streamOrder) waitStreams(base uintptr) error {
	tag := o.g.Tag(base)
	if tag == nil {
		return nil
	}
	var ss []cuda.Stream
	switch t := settled(tag); {
	case t == tagMulti:
		sh := o.shard(base)
		sh.mu.Lock()
		if u, ok := sh.m[base]; ok {
			ss = append(append(ss, u.one), u.more...)
		}
		sh.mu.Unlock()
	case t > tagHeld:
		ss = append(ss, tagStream(t))
	}
	var errs []error
	for _, s := range ss {
		if s != noStream {
			errs = append(errs, o.waitUnforgotten(s))
		}
	}
	return errors.Join(errs...)
}

// waitUnforgotten synchronizes s unless it was forgotten (it has passed the buffer), in one
// step against ForgetStream (forgetMu). A stream destroyed without ForgetStream whose handle a
// reclaim found refused (streamq's Lists.Refused, asked after the wait) is waited for as the
// reclaims wait for it, by a synchronize of the context (waitRefused): the driver may have given
// the handle to a new stream, whose synchronize says nothing of the destroyed one's work.
// A refusal of the handle that this wait meets is kept on s's list (loseRefused), as a
// reclaim's poll keeps it: the driver may give the handle to a new stream before the reclaims
// ask it again.
func (o *streamOrder) waitUnforgotten(s cuda.Stream) error {
	waited, err := o.waitHandle(s)
	switch {
	case !waited:
		return nil
	case errors.Is(err, pinmalloc.ErrInvalidHandle):
		o.reclMu.Lock()
		o.loseRefused(s, err)
		o.reclMu.Unlock()
	case o.lists.Refused(streamq.Stream(s)):
		return o.waitRefused(s)
	}
	return streamError("", err)
}

// waitHandle is waitUnforgotten's wait of s's handle, unless s was forgotten (waited false).
func (o *streamOrder) waitHandle(s cuda.Stream) (waited bool, err error) {
	o.forgetMu.RLock()
	defer o.forgetMu.RUnlock()
	if o.lists.Forgotten(streamq.Stream(s)) {
		return false, nil
	}
	if waitStreamsLooked != nil {
		waitStreamsLooked(s)
	}
	return true, o.points().WaitStream(uintptr(s))
}

// waitRefused waits for the work of stream s, whose handle the driver refused (destroyed
// without ForgetStream) and Recover has not answered yet, by a synchronize of the context,
// unless a capture holds a stream the pool knows (or the legacy stream): that synchronize
// would end it, and WaitStreams is refused (an error matching cuda.ErrCapturing) until the
// capture has ended. The next reclaim's Recover hands back the buffers deferred on s. It takes
// reclMu (the capture check is the reclaimer's) after forgetMu is let go.
func (o *streamOrder) waitRefused(s cuda.Stream) error {
	o.reclMu.Lock()
	defer o.reclMu.Unlock()
	c, held, err := o.lists.WaitAllUncaptured()
	if held {
		return fmt.Errorf("pinned: wait for stream %#x: the driver refused its handle (destroyed without ForgetStream), "+
			"and the synchronize of the context that waits for its work instead would end the CUDA graph capture on stream %#x: %w",
			s, c, pinmalloc.ErrCapturing)
	}
	return streamError(fmt.Sprintf("wait for stream %#x, refused by the driver: synchronize the context", s), err)
}

// waitStreamsLooked, when set (by tests), runs in WaitStreams between its look at whether
// stream s was forgotten and its wait for s.
var waitStreamsLooked func(cuda.Stream)
