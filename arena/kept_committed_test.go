package arena

import (
	"testing"
	"time"
)

// TestKeptCountsCommittedOnly: Stats.Kept counts the committed granules of idle tracked ranges,
// so that it stays part of Committed. Before, it counted every whole granule of the range: a
// range reserved and committed in part (as the heap's reuse of a huge range commits only the
// bytes asked for) read Kept above Committed.
func TestKeptCountsCommittedOnly(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: time.Hour})
	seg, err := a.Reserve(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	const size, committed = 1 << 20, 256 << 10
	if _, err := a.Commit(seg.Base, committed); err != nil {
		t.Fatal(err)
	}
	var k Kept
	if err := a.Track(&k, seg.Base, size); err != nil {
		t.Fatal(err)
	}
	a.Idle(&k)
	if st := a.Stats(); st.Kept != committed || st.Kept > st.Committed {
		t.Errorf("idle range of %d bytes, %d of them committed: Kept %d, Committed %d; want Kept %d",
			size, committed, st.Kept, st.Committed, committed)
	}
	if !k.Claim() {
		t.Fatal("claim: given up within the delay")
	}
	a.Untrack(&k)
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
}
