package pinned

import (
	"testing"
)

// TestStatsOneInstant frees the pool's only buffer and trims it at the point where Stats lets
// the shards go (statsLetGo): Stats read the shards' InUse, then the arena's Committed after
// the purge, and showed 1 MiB in use of 0 committed. Its figures must be those of one instant:
// InUse at most Committed, Live and InUse both zero or both not.
func TestStatsOneInstant(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, PurgeDelay: -1})
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	fired := false
	statsLetGo = func() {
		statsLetGo = nil // once: the Stats below, not the checks' own
		fired = true
		if err := p.Free(b); err != nil {
			t.Error(err)
		}
		if err := p.Trim(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { statsLetGo = nil })
	st := p.Stats()
	if !fired {
		t.Fatal("Stats ran no statsLetGo")
	}
	if st.InUse > st.Committed {
		t.Errorf("Stats: %d bytes in use of %d committed", st.InUse, st.Committed)
	}
	if (st.Live == 0) != (st.InUse == 0) || st.PeakInUse < st.InUse {
		t.Errorf("Stats: %d live of %d bytes, peak %d", st.Live, st.InUse, st.PeakInUse)
	}
	if st.InUse > 0 && st.Fragmentation < 1 {
		t.Errorf("Stats: fragmentation %.3f", st.Fragmentation)
	}
	if st := p.Stats(); st.InUse != 0 || st.Committed != 0 {
		t.Errorf("after Free and Trim: %d bytes in use of %d committed", st.InUse, st.Committed)
	}
}

// TestUsageOneInstant is TestStatsOneInstant for Usage, which held each shard in turn and read
// the arena after letting the last go.
func TestUsageOneInstant(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, PurgeDelay: -1})
	b, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	fired := false
	statsLetGo = func() {
		statsLetGo = nil
		fired = true
		if err := p.Free(b); err != nil {
			t.Error(err)
		}
		if err := p.Trim(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { statsLetGo = nil })
	u := p.Usage()
	if !fired {
		t.Fatal("Usage ran no statsLetGo")
	}
	if u.InUse > u.Committed || (u.Live == 0) != (u.InUse == 0) {
		t.Errorf("Usage: %d live of %d bytes in use, %d committed", u.Live, u.InUse, u.Committed)
	}
	if u := p.Usage(); u.InUse != 0 || u.Committed != 0 {
		t.Errorf("after Free and Trim: %d bytes in use of %d committed", u.InUse, u.Committed)
	}
}
