package shared

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// queueCopyInto queues a copy of 4 KiB of device memory into buf on a new stream of d, which
// the fake driver f leaves pending (its late execution) until something waits for the stream;
// the stream and the device memory go when the test ends.
func queueCopyInto(t *testing.T, f *fakecuda.Driver, d *cuda.Device, buf []byte) {
	t.Helper()
	dp, err := d.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.StreamCreate(true)
	if err != nil {
		d.MemFree(dp)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range []error{d.StreamSynchronize(s), d.StreamDestroy(s), d.MemFree(dp)} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	if err := d.MemcpyDtoHAsync(mem.Addr(buf), dp, 4096, s); err != nil {
		t.Fatal(err)
	}
	if f.Pending() == 0 {
		t.Fatal("the copy ran at once: the fake driver's late execution is off")
	}
}

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
	queueCopyInto(t, f, d, b)
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("Detach gave the grants back with %d streams still to run (a copy into the pool)", n)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
}

// A process that dies holding a buffer another process still copies into on its stream: the
// dead process's grant is handed out again only after that stream has passed (the survivor
// synchronized at the fence), not while the copy is queued.
func TestDeadGrantsWaitForPeersStreams(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	w, path := serveTest(t, Options{Size: 4 << 20, GrantSize: 2 << 20})
	q, err := Attach(path, AttachOptions{Device: cuda.Wrap[*pcuda.Device](d)})
	if err != nil {
		t.Fatal(err)
	}
	// Three locked mappings of a 4 MiB pool in one test process pass an ordinary user's 8 MiB
	// memlock limit: the dead process, which no stream uses, may stay pageable.
	dead, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := dead.Alloc(4096) // the dead process's grant
	if err != nil {
		t.Fatal(err)
	}
	qb, err := q.Alloc(4096) // the pool's other grant
	if err != nil {
		t.Fatal(err)
	}
	h, err := dead.Handle(b)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := q.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	queueCopyInto(t, f, d, peer)
	// The process dies: its socket closes without a detach (in this process, the owner does
	// not wait for an exit).
	dead.granter.(*connGranter).c.Close()
	waitFor(t, func() bool { return w.Attached() == 1 })
	var ob []byte
	waitFor(t, func() bool { ob, err = w.Alloc(4096); return err == nil })
	if n := f.Pending(); n != 0 {
		t.Fatalf("the dead process's grant was handed out with %d streams still to run (a peer's copy into it)", n)
	}
	if r, _, _ := w.locate(mem.Addr(ob)); r != 0 {
		t.Fatalf("the owner's buffer is in region %d", r)
	}
	for _, e := range []error{w.Free(ob), q.Free(qb), q.Detach()} {
		if e != nil {
			t.Fatal(e)
		}
	}
	_ = dead.Detach() // its socket is gone: the owner took its memory back already
}

// TestDetachedBeforeDetachReturns checks that a process that Detach has returned for is no
// longer attached: the owner answers the detach only once it has taken the process's memory
// back and freed its slot, so that a Close right after it succeeds (the package's Example did
// that, and failed now and then with ErrAttached).
func TestDetachedBeforeDetachReturns(t *testing.T) {
	w, path := serveTest(t, Options{Size: 2 << 20, FallbackPageable: true})
	for i := range 500 {
		p, err := Attach(path, AttachOptions{FallbackPageable: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Detach(); err != nil {
			t.Fatal(err)
		}
		if n := w.Attached(); n != 0 {
			t.Fatalf("round %d: %d processes still attached after Detach returned", i, n)
		}
	}
}
