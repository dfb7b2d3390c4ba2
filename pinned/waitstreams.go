package pinned

import (
	"errors"

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
// stream and its wait. Errors: b not in a live buffer of the pool (ErrNotOwned), a buffer the
// caller has freed, its free done or still waiting for its streams or holds (ErrDoubleFree), a
// stream the driver refuses (ErrInvalidStream), a stream capturing a CUDA graph, which no wait
// may touch (matching cuda.ErrCapturing only: wait again once the capture has ended), a
// released pool (ErrClosed).
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
// step against ForgetStream (forgetMu).
func (o *streamOrder) waitUnforgotten(s cuda.Stream) error {
	o.forgetMu.RLock()
	defer o.forgetMu.RUnlock()
	if o.lists.Forgotten(streamq.Stream(s)) {
		return nil
	}
	if waitStreamsLooked != nil {
		waitStreamsLooked(s)
	}
	return streamError("", o.points().WaitStream(uintptr(s)))
}

// waitStreamsLooked, when set (by tests), runs in WaitStreams between its look at whether
// stream s was forgotten and its wait for s.
var waitStreamsLooked func(cuda.Stream)
