package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostVMMProbeReleaseRefused: NewHostVMM creates one granule to learn that the driver
// makes host memory where it was asked, and releases it. When the driver refuses that release,
// the provider keeps the handle, counted, and releases it again later (its next commit, or
// ReleaseKept at the arena's Close), and places its memory where it would have. Before, the
// refusal failed the probe of the node nearest the device, whose handle was dropped (2 MiB of
// pinned host memory the process could never give back), and the provider fell back to the
// HOST location: memory placed on no chosen node.
func TestFakeHostVMMProbeReleaseRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	plain, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM with the probe's release refused", err)
	if p.Location() != plain.Location() {
		t.Errorf("with the probe's release refused the memory lives at %+v, want %+v as without",
			p.Location(), plain.Location())
	}
	if c := p.Counters(); c.Handles != 1 || f.Stat(fakecuda.Handles) != 1 {
		t.Errorf("after NewHostVMM: provider %+v, fake %d handles; want the probe's handle kept "+
			"and counted", c, f.Stat(fakecuda.Handles))
	}
	a, err := arena.New(arena.Options{Provider: p, Capacity: 8 << 20, PurgeDelay: -1})
	must(t, "arena.New", err)
	s, err := a.Alloc(2<<20, 1)
	must(t, "Alloc", err)
	must(t, "Free", a.Free(s))
	must(t, "Close", a.Close())
	if c := p.Counters(); c.Live() != 0 || f.Stat(fakecuda.Handles) != 0 ||
		f.Stat(fakecuda.HostVMMBytes) != 0 {
		t.Errorf("after Close: provider %+v, fake %d handles, %d host VMM bytes; want nothing held",
			c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.HostVMMBytes))
	}
}
