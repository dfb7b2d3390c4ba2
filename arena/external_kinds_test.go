package arena

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestExternalGivesBackPageableOnly: an Exclusive external region that is not Committed gives
// its free pages back with madvise(MADV_DONTNEED) only when it holds pageable memory. A locked
// region's decommits were refused by the system (EINVAL) at every purge, and memory registered
// with the driver (HostPinned, Managed) was dropped from the program's mapping while the driver
// kept its pages pinned: after Trim the free span read as zero where the GPU's copies would
// still land in the old pages. Now such a region keeps its bytes and decommits nothing.
func TestExternalGivesBackPageableOnly(t *testing.T) {
	const size = 4 << 20
	for _, kind := range []Kind{HostPageable, HostLocked, HostPinned, Managed} {
		t.Run(kind.String(), func(t *testing.T) {
			m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = unix.Munmap(m) }()
			if kind == HostLocked {
				if err := unix.Mlock(m[:1<<20]); err != nil {
					t.Skipf("mlock of 1 MiB: %v", err)
				}
			}
			p, err := External(ExternalRegion{Base: mem.Addr(m), Size: size, Kind: kind, Exclusive: true})
			if err != nil {
				t.Fatal(err)
			}
			a := newTestArena(t, Options{Provider: p, PurgeDelay: -1})
			s, err := a.Alloc(1<<20, 1)
			if err != nil {
				t.Fatal(err)
			}
			b := mem.Bytes(s.Base, s.Size)
			for i := range b {
				b[i] = 0x5a
			}
			if err := a.Free(s); err != nil {
				t.Fatal(err)
			}
			a.Trim()
			st := a.Stats()
			if kind == HostPageable {
				if st.Purged == 0 || st.Committed != 0 {
					t.Fatalf("pageable region: %d bytes purged, %d committed after Trim: want it given back", st.Purged, st.Committed)
				}
				return
			}
			if st.Purged != 0 || st.DecommitsRefused != 0 {
				t.Fatalf("%s region: %d bytes purged, %d decommits refused after Trim: want none tried", kind, st.Purged, st.DecommitsRefused)
			}
			for i, c := range b {
				if c != 0x5a {
					t.Fatalf("%s region: byte %d of the freed span reads %#x after Trim: its page was dropped", kind, i, c)
				}
			}
		})
	}
}
