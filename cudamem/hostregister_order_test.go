package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeHostRegisterUnregistersBeforeUnmap: HostRegister.Release ends every registration of
// its region before it unmaps the region, whether the region was committed in pieces or
// populated whole at Reserve. The fake cannot see an munmap (Go makes it with a raw system
// call), so it cannot refuse a registration whose memory was unmapped under it, as the real
// driver would leave it: pinning pages no mapping holds, and refusing a later registration at
// that address. This test holds the order in its place.
func TestFakeHostRegisterUnregistersBeforeUnmap(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, populate := range []bool{false, true} {
		p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{
			HostOptions: arena.HostOptions{Populate: populate}})
		must(t, "NewHostRegister", err)
		r, err := p.Reserve(4<<20, 2<<20)
		must(t, "Reserve", err)
		if !populate {
			must(t, "Commit", p.Commit(r, 0, 2<<20))
			must(t, "Commit", p.Commit(r, 2<<20, 2<<20))
		}
		if n := f.Stat(fakecuda.Registrations); n == 0 {
			t.Fatalf("populate %v: no registration to end", populate)
		}
		ran := false
		restore := cudamem.SetReleaseUnmapHook(func() {
			ran = true
			if n := f.Stat(fakecuda.Registrations); n != 0 {
				t.Errorf("populate %v: %d registrations left when the region is unmapped",
					populate, n)
			}
			if _, _, ok := p.RegistrationOf(r.Base); ok {
				t.Errorf("populate %v: the provider still records a registration at the unmap",
					populate)
			}
			if populate {
				_ = mem.Bytes(r.Base, r.Size)[r.Size-1] // still mapped: readable
			}
		})
		must(t, "Release", p.Release(r))
		restore()
		if !ran {
			t.Errorf("populate %v: Release did not reach its unmap", populate)
		}
	}
}
