package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeVMMMapOutOfMemory: a commit whose cuMemMap the driver refuses for want of memory
// says so once, naming cuMemMap, and matches arena.ErrCommit, arena.ErrExhausted and the
// driver's error; the granules it made are given back. Before, it read "arena: cannot commit
// memory: cuMemCreate of ... bytes ...: arena: cannot commit memory: cuMemMap of ...": the
// commit's failure said twice, and blamed on the call that had succeeded.
func TestFakeVMMMapOutOfMemory(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	for _, pr := range providersOf(d, "DeviceVMM", "HostVMM") {
		p, err := pr.new()
		must(t, pr.name, err)
		r, err := p.Reserve(4<<20, 2<<20)
		must(t, pr.name+": Reserve", err)
		f.FailAfter(fakecuda.CallMap, 1, fakecuda.ResultOutOfMemory)
		err = p.Commit(r, 0, 4<<20)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, arena.ErrExhausted) ||
			!errors.Is(err, pinmalloc.ErrOutOfMemory) ||
			strings.Count(msg, "cannot commit memory") != 1 || !strings.Contains(msg, "cuMemMap") ||
			strings.Contains(msg, "cuMemCreate") {
			t.Errorf("%s: a commit with its cuMemMap out of memory: %v; want arena.ErrCommit and "+
				"ErrExhausted, said once, naming cuMemMap alone", pr.name, err)
		}
		if c := p.Counters(); c.Handles != 0 || c.Committed != 0 || f.Stat(fakecuda.Handles) != 0 {
			t.Errorf("%s: after the failed commit: provider %+v, fake %d handles", pr.name, c,
				f.Stat(fakecuda.Handles))
		}
		must(t, pr.name+": Release", p.Release(r))
	}
}
