package streamq_test

import (
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestSettleWaitsForPeerPoints: lists of another item type on the same points (a device heap's
// idle purge, beside its deferred frees) whose poll gave blocking stream b's items a quiet
// point while the caller's work ran on the legacy stream: once the caller has synchronized the
// legacy stream, nothing of the caller's is in flight, and Settle with the peer hands back
// everything (the peer's point waited for, then passed at the peer's next poll). Before, Settle
// saw only its own lists' points and said b was running. The same behind the lists' own point
// in the legacy stream, recorded before the peer's, though the lists' polls had recorded more
// points than the peer's (their order is the points'). Settle still says running, and leaves
// the work queued, with the caller's work on b after the peer's point, or on the legacy stream
// before it.
func TestSettleWaitsForPeerPoints(t *testing.T) {
	r, a, bs := newQuietRig(t, 1)
	if r == nil {
		return
	}
	b := bs[0]
	peer := streamq.NewLists[string](r.ls.Points(), nil, 1000)
	ss := []streamq.Stream{b} // the caller's stream
	// peerPoint gives the peer's item on b a point, behind the legacy stream's work.
	peerPoint := func(what string) {
		t.Helper()
		peer.Push(peer.Get(b), "trim b") // no check: b is the caller's

		got, err := peer.Poll(nil)
		r.must(err)
		if len(got) != 0 || r.f.Pending() == 0 {
			t.Fatalf("%s: the peer's poll gave %v, left nothing pending; want a point in b", what, got)
		}
	}
	settle := func(what string, want []int, wantRunning streamq.Stream) {
		t.Helper()
		got, s, running, err := r.ls.Settle(nil, ss, peer)
		slices.Sort(got)
		if err != nil || running != (wantRunning != noStream) || running && s != wantRunning || !slices.Equal(got, want) {
			t.Fatalf("%s: Settle gave %v, running %v (stream %#x), %v; want %v, running stream %#x", what, got, running, s, err, want, wantRunning)
		}
	}
	peerBack := func(what string) {
		t.Helper()
		got, err := peer.Poll(nil)
		if err != nil || !slices.Equal(got, []string{"trim b"}) {
			t.Fatalf("%s: the peer's poll after Settle gave %v, %v; want its item", what, got, err)
		}
	}

	r.memset(0)
	peerPoint("the caller's work on the legacy stream")
	r.must(r.dev.StreamSynchronize(0)) // the caller's: the peer's point in b stays in flight
	settle("the caller's legacy work synchronized", nil, noStream)
	if n := r.f.Pending(); n != 0 {
		t.Fatalf("%d streams have work pending after Settle", n)
	}
	peerBack("the caller's legacy work synchronized")

	// The lists' polls record points of their own (a's, run), so that their count runs ahead
	// of the peer's; then one in the legacy stream, and the peer's in b behind it.
	for i := range 3 {
		r.memset(a)
		r.push(a, 10+i)
		r.poll("a busy", nil)
		r.must(r.dev.StreamSynchronize(a))
		r.poll("a run", []int{10 + i})
	}
	r.push(0, 1)
	r.poll("the legacy stream's item", nil)
	peerPoint("behind the lists' legacy point")
	settle("behind the lists' legacy point", []int{1}, noStream)
	peerBack("behind the lists' legacy point")

	// The caller's work on b after the peer's point: running, the work left queued.
	r.memset(0)
	peerPoint("work on b after the peer's point")
	r.must(r.dev.StreamSynchronize(0))
	r.memset(b)
	settle("work on b after the peer's point", nil, b)
	r.pending("work on b after the peer's point")
	r.must(r.dev.Synchronize())
	settle("work on b after the peer's point, then run", nil, noStream)
	peerBack("work on b after the peer's point")

	// The caller's legacy work, which the peer's point waits for, still queued.
	r.memset(0)
	peerPoint("work on the legacy stream before the peer's point")
	settle("work on the legacy stream before the peer's point", nil, b)
	r.pending("work on the legacy stream before the peer's point")
	r.must(r.dev.Synchronize())
	settle("work on the legacy stream before the peer's point, then run", nil, noStream)
	peerBack("work on the legacy stream before the peer's point")
	r.eventsBack()
}
