package shared

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// A process that detaches with a copy still queued on one of its streams into its buffer:
// the copy has run before its grants go back to the owner (who may hand them to another
// process at once), not after.
func TestDetachWaitsForStreams(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	w, path := serveTest(t, Options{Size: 4 << 20})
	p, err := Attach(path, AttachOptions{Device: cuda.Wrap[*pcuda.Device](d)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := d.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoHAsync(mem.Addr(b), dp, 4096, s); err != nil {
		t.Fatal(err)
	}
	if f.Pending() == 0 {
		t.Fatal("the copy ran at once: the fake driver's late execution is off")
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("Detach gave the grants back with %d streams still to run (a copy into the pool)", n)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	if err := d.StreamDestroy(s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemFree(dp); err != nil {
		t.Fatal(err)
	}
}
