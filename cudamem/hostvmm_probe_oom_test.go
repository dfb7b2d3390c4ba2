package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostVMMProbeOutOfMemory: NewHostVMM on a node asked for, whose probe granule's
// cuMemCreate the driver refuses for want of memory, fails with memory pressure
// (arena.ErrExhausted, the driver's out of memory), not arena.ErrInvalid: the node is the
// machine's and the options can work once memory is free. Before, it wrapped arena.ErrInvalid
// alone.
func TestFakeHostVMMProbeOutOfMemory(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	o := cudamem.HostOptions{NUMA: arena.NUMANode(0)}
	p, err := cudamem.NewHostVMM(public(d), o)
	must(t, "NewHostVMM", err)
	must(t, "ReleaseKept", p.ReleaseKept())
	f.FailAfter(fakecuda.CallCreate, 0, fakecuda.ResultOutOfMemory)
	_, err = cudamem.NewHostVMM(public(d), o)
	if !errors.Is(err, arena.ErrExhausted) || !errors.Is(err, pinmalloc.ErrOutOfMemory) ||
		errors.Is(err, arena.ErrInvalid) {
		t.Errorf("NewHostVMM with its probe out of memory = %v; want arena.ErrExhausted and "+
			"the driver's error, not arena.ErrInvalid", err)
	}
	if n := f.Stat(fakecuda.Handles); n != 0 {
		t.Errorf("after the failed NewHostVMM: %d handles, want 0", n)
	}
}

// TestFakeHostVMMNearestNodeOutOfMemory: NewHostVMM with no node asked for, whose probe
// granule at the node nearest the device the driver refuses for want of memory, fails with
// memory pressure (arena.ErrExhausted), as on a node asked for. Before, any refusal there made
// it fall back to the HOST location, which the driver may place anywhere: a moment's pressure
// on the device's node made a provider far from the device for good, and said nothing.
func TestFakeHostVMMNearestNodeOutOfMemory(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	near := p.Location()
	must(t, "ReleaseKept", p.ReleaseKept())
	if near.Type != pcuda.LocationHostNUMA {
		t.Fatalf("NewHostVMM with no node asked for: %+v; want the node nearest the device", near)
	}
	f.FailAfter(fakecuda.CallCreate, 0, fakecuda.ResultOutOfMemory)
	p, err = cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	if err == nil {
		t.Errorf("NewHostVMM with the nearest node's probe out of memory made a provider at %+v; "+
			"want arena.ErrExhausted, not a fallback to another location", p.Location())
		must(t, "ReleaseKept", p.ReleaseKept())
	} else if !errors.Is(err, arena.ErrExhausted) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("NewHostVMM with the nearest node's probe out of memory = %v; want arena.ErrExhausted", err)
	}
}
