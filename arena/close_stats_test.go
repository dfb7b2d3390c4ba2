package arena

import "testing"

// TestCloseStatsCountNoChunks: after Close has released every region, Stats counts no chunk
// and no alignment waste, as it counts no region: Close left both at their last values, a
// misreport of chunks that no longer exist. A region kept refused (refused.go) is in neither
// either, as after a release refused by a purge.
func TestCloseStatsCountNoChunks(t *testing.T) {
	for _, refuse := range []int{0, 1} {
		p := &refuseRelease{Provider: PageableHost(HostOptions{}), n: refuse}
		a, err := New(Options{Provider: p, Capacity: 8 << 20, RegionSize: 4 << 20,
			PurgeDelay: -1, Align: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		s, err := a.Alloc(1<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); st.Chunks == 0 {
			t.Fatalf("refused %d: no chunk counted before Close", refuse)
		}
		err = a.Close()
		if (err != nil) != (refuse != 0) {
			t.Fatalf("refused %d: Close = %v", refuse, err)
		}
		st := a.Stats()
		if st.Regions != 0 || st.Chunks != 0 || st.AlignWaste != 0 || st.RegionsRefused != refuse {
			t.Errorf("refused %d, after Close: %d regions, %d chunks, %d align waste, %d "+
				"refused; want 0, 0, 0, %d", refuse, st.Regions, st.Chunks, st.AlignWaste,
				st.RegionsRefused, refuse)
		}
		if refuse != 0 {
			if err := a.Close(); err != nil {
				t.Fatalf("the next Close: %v", err)
			}
		}
	}
}
