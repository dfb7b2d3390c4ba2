package streamq

import (
	"errors"
	"fmt"
)

// The streams a user has seen: the lists are the one cache of them in the module. A stream's
// list is its state: made when the driver first accepts the stream (Check), gone when the
// stream has had no items for linger polls, or at Forget. pinned.Pool, device.Heap and
// uvm.Tier all check the streams they are given here, so that a stream is refused the same
// way everywhere: the per-thread default stream always, any other handle the driver does not
// accept as a stream of the points' device.
//
// Forget marks a stream forgotten too: its user says it has passed all the work anyone
// recorded on it (a pool's buffers recorded on it need not wait for it any more), until a list
// is made for it again (a new stream may get its handle). Forgotten answers for a stream with
// no list only. The set is bounded (maxForgotten): past that it is emptied, which only makes
// frees of buffers recorded on those streams wait for their handles again (a handle the driver
// no longer knows is answered by a synchronize of the context: Recover).
//
// The streams Check accepted are kept too (seen), until Forget, whether they have a list or not:
// a stream whose list left may still be named by its user's state (a pool's live buffer
// recorded on it), and a capture on it must be seen before a synchronize of the context
// (Captured). The set is bounded (maxSeen): past that it is emptied, which only makes Captured
// miss the streams seen before, until Check sees them again, in a program that destroys streams
// without forgetting them (which the contract forbids) or uses that many at once.

// ErrPerThreadStream is Check's refusal of the per-thread default stream (CU_STREAM_PER_THREAD,
// handle 2): it names the default stream of whichever OS thread makes a call, so a point
// recorded on it by a later poll, on another thread, would be in another stream, and work
// queued on it by two threads is not ordered.
var ErrPerThreadStream = errors.New("the per-thread default stream (0x2) names the default stream of whichever OS thread makes a call; use a stream of your own")

// maxForgotten bounds the streams forgotten and not seen since.
const maxForgotten = 4096

// maxSeen bounds the streams seen and not forgotten.
const maxSeen = 4096

// Check returns the list of stream s: the one found last, one the lists have, or a new one for
// a stream the driver accepts now, asked by recording a point of the lists' device in it
// (Points.Check). The per-thread default stream is refused (ErrPerThreadStream), and so is a
// handle the driver refuses (a destroyed stream, another device's): the error says which. An
// event the driver cannot make to ask with is no refusal of s: Points.Check's error, matching
// ErrNoEvent, s neither refused nor accepted (the next Check asks again). The legacy default
// stream (0, CU_STREAM_LEGACY) is every context's, so it is not asked about: a
// point there would wait for every blocking stream's work, and stay in flight where a caller
// then asks whether the stream has work (a heap's Close). Safe for concurrent use; a list
// found may leave the lists meanwhile (Push follows it).
func (ls *Lists[T]) Check(s Stream) (*List[T], error) {
	if l := ls.last.Load(); l != nil && l.s == s {
		return l, nil
	}
	return ls.checkSlow(s)
}

func (ls *Lists[T]) checkSlow(s Stream) (*List[T], error) {
	if s == PerThreadStream {
		return nil, ErrPerThreadStream
	}
	if ls.Lookup(s) == nil && !DefaultStream(s) { // the legacy stream, every context's, is not asked about
		ls.checks.Add(1)
		if err := ls.points.Check(s); errors.Is(err, ErrNoEvent) {
			return nil, err // the driver's want, not the stream's: it was not asked
		} else if err != nil {
			return nil, fmt.Errorf("stream %#x, refused as a stream of CUDA device %d: %w", s, ls.points.Ordinal(), err)
		}
	}
	l := ls.getSeen(s)
	ls.Found(l)
	return l, nil
}

// getSeen is Get of s, a stream Check accepted, which it keeps among the streams seen.
func (ls *Lists[T]) getSeen(s Stream) *List[T] {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if _, ok := ls.seen[s]; !ok {
		if len(ls.seen) >= maxSeen {
			clear(ls.seen) // only makes Captured miss those until seen again: see above
		}
		ls.seen[s] = struct{}{}
	}
	return ls.getLocked(s)
}

// seenStreams returns the streams seen (getSeen) and not forgotten, in a slice the caller
// empties (endSeen). It is the reclaimer's.
func (ls *Lists[T]) seenStreams() []Stream {
	ls.seenArr = ls.appendSeen(ls.seenArr)
	return ls.seenArr
}

// appendSeen appends the streams seen and not forgotten to dst, under the lists' lock.
func (ls *Lists[T]) appendSeen(dst []Stream) []Stream {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for s := range ls.seen {
		dst = append(dst, s)
	}
	return dst
}

// Seen yields the streams seen (Check) and not forgotten since, with a list or not: those a
// Prune took out of the lists too. It walks a copy made under the lists' lock, so yield may
// call the lists. It allocates.
func (ls *Lists[T]) Seen(yield func(Stream) bool) {
	for _, s := range ls.appendSeen(nil) {
		if !yield(s) {
			return
		}
	}
}

// endSeen empties the slice seenStreams returned, keeping its room.
func (ls *Lists[T]) endSeen() { ls.seenArr = ls.seenArr[:0] }

// Checks returns the number of streams Check asked the driver about, for tests.
func (ls *Lists[T]) Checks() int64 { return ls.checks.Load() }

// Forget is the start of forgetting stream s, which the caller is about to synchronize and
// destroy: the list found last stops standing for s (a new stream may get its handle), s is
// forgotten once its list has gone (Forgotten), and it returns s's list in the lists, or nil,
// for Release once s is synchronized.
func (ls *Lists[T]) Forget(s Stream) *List[T] {
	if l := ls.last.Load(); l != nil && l.s == s {
		ls.last.CompareAndSwap(l, nil)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.forgot) >= maxForgotten {
		clear(ls.forgot) // only makes later frees wait for those handles again: see above
	}
	ls.forgot[s] = struct{}{}
	ls.nforgot.Store(int32(len(ls.forgot)))
	delete(ls.seen, s)
	return ls.m[s]
}

// Forgotten reports whether s was forgotten (Forget), has no list, and has had none made
// since: everything recorded on it before has passed. Safe for concurrent use; it costs an
// atomic load while no stream is forgotten.
func (ls *Lists[T]) Forgotten(s Stream) bool {
	if ls.nforgot.Load() == 0 {
		return false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	_, forgot := ls.forgot[s]
	return forgot && ls.m[s] == nil
}

// Prune takes every list with no items out of the lists, for a user whose lists hold none and
// are never polled (the streams uvm.Tier checks): their streams are checked again at their
// next use. The caller calls it when Streams passes a bound of its own.
func (ls *Lists[T]) Prune() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.m {
		l.mu.Lock()
		if len(l.open)+len(l.marked) == 0 {
			ls.unlist(l)
			ls.last.CompareAndSwap(l, nil)
		}
		l.mu.Unlock()
	}
}
