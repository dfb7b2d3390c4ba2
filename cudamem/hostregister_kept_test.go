package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostRegisterReleasesKept: HostRegister passes on the host mapping's ReleaseKept, so
// that Arena.Close unmaps what a failed Reserve's refused unwind left mapped. Before, it was
// no arena.KeptReleaser: such a region stayed mapped until the provider's next Reserve or
// Release, which after Close never comes.
func TestFakeHostRegisterReleasesKept(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	k, ok := arena.Provider(p).(arena.KeptReleaser)
	if !ok {
		t.Fatal("HostRegister is no arena.KeptReleaser")
	}
	must(t, "ReleaseKept with nothing kept", k.ReleaseKept())
}
