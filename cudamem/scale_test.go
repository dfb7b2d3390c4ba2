package cudamem_test

// Pinning at scale against the fake driver: commits spread over the workers, failures midway
// that leave the driver clean, Precommit's batches on both host paths.

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/smaps"
)

// newWorkerArena is newArena with CommitWorkers workers.
func newWorkerArena(t *testing.T, p counted, capacity uintptr, workers int) *arena.Arena {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: p, Capacity: capacity, PurgeDelay: -1, CommitWorkers: workers})
	must(t, "arena.New", err)
	t.Cleanup(func() {
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after Close: %+v", p.Name(), c)
		}
	})
	return a
}

// clean checks that a failed commit left nothing behind: the driver holds exactly what the
// arena counts as committed, no handle or mapping beyond it, no sticky error, and a
// synchronize succeeds.
func clean(t *testing.T, f *fakecuda.Driver, d *cuda.Device, p counted, a *arena.Arena, what string) {
	t.Helper()
	st := a.Stats()
	c := p.Counters()
	held := f.Stat(fakecuda.HostVMMBytes) + f.Stat(fakecuda.RegisteredBytes)
	if uint64(held) != st.Committed || uint64(c.Committed) != st.Committed || c.Handles != f.Stat(fakecuda.Handles) ||
		f.Stat(fakecuda.Handles) != f.Stat(fakecuda.Mappings) || c.Registrations != f.Stat(fakecuda.Registrations) {
		t.Errorf("%s: arena committed %d, provider %+v, fake holds %d bytes, %d handles, %d mappings, %d registrations",
			what, st.Committed, c, held, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Registrations))
	}
	if e := f.StickyError(); e != 0 {
		t.Errorf("%s: sticky error %d", what, e)
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("%s: a synchronize after it: %v", what, err)
	}
}

// TestFakeVMMParallel: a 32 MiB span of VMM host memory commits on 4 threads at once, is one
// DMA range, and Trim decommits it on 4 threads.
func TestFakeVMMParallel(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	if !p.Caps().Splits {
		t.Fatal("VMM host memory does not split")
	}
	a := newWorkerArena(t, p, 1<<30, 4)
	f.SetPinCost(false, 30*time.Millisecond, 30*time.Millisecond)
	defer f.SetPinCost(false, 0, 0)
	s, err := a.Alloc(32<<20, 256)
	must(t, "Alloc", err)
	if n := f.MaxInflight(); n != 4 {
		t.Errorf("a 32 MiB span pinned %d granules at once, want 4", n)
	}
	copyBoth(t, d, s.Base, s.Size)
	clean(t, f, d, p, a, "after the commit")
	must(t, "Free", a.Free(s))
	a.Trim()
	if n := f.MaxInflight(); n != 4 {
		t.Errorf("Trim released %d granules at once, want 4", n)
	}
	clean(t, f, d, p, a, "after Trim")
	if a.Stats().Committed != 0 {
		t.Errorf("Trim left %d bytes", a.Stats().Committed)
	}
}

// TestFakeVMMFailureMidway: cuMemCreate, cuMemMap or cuMemSetAccess failing in the middle of a
// parallel commit leaves nothing pinned, no sticky error, and the next commit works.
func TestFakeVMMFailureMidway(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	a := newWorkerArena(t, p, 1<<30, 4)
	keep, err := a.Alloc(4<<20, 256) // something committed before, which must stay
	must(t, "Alloc", err)
	for _, c := range []struct {
		call fakecuda.PinCall
		skip int
		code int
		want error
	}{
		{fakecuda.CallCreate, 9, fakecuda.ResultInvalidValue, pinmalloc.ErrInvalidValue},
		{fakecuda.CallMap, 5, fakecuda.ResultInvalidValue, pinmalloc.ErrInvalidValue},
		{fakecuda.CallAccess, 2, fakecuda.ResultNotSupported, pinmalloc.ErrNotSupported},
	} {
		f.FailAfter(c.call, c.skip, c.code)
		_, err := a.Alloc(32<<20, 256)
		if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, c.want) {
			t.Fatalf("call %d failing after %d: Alloc = %v", c.call, c.skip, err)
		}
		clean(t, f, d, p, a, "after the failure")
		if st := a.Stats(); st.Committed != 4<<20 || st.ChunksInUse != 2 {
			t.Errorf("call %d failing: committed %d, chunks in use %d", c.call, st.Committed, st.ChunksInUse)
		}
		s, err := a.Alloc(32<<20, 256)
		must(t, "Alloc after the failure", err)
		copyBoth(t, d, s.Base, s.Size)
		must(t, "Free", a.Free(s))
		a.Trim()
	}
	must(t, "Free", a.Free(keep))
}

// TestFakeRegisterParallel: on the registration path a 32 MiB span is faulted in by the
// workers and registered in one call, and Precommit registers chunk by chunk, several at once.
func TestFakeRegisterParallel(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a := newWorkerArena(t, p, 1<<30, 4)
	madv := p.HostCounters().Madvise
	regs := f.Stat(fakecuda.RegisterCalls)
	s, err := a.Alloc(32<<20, 256)
	must(t, "Alloc", err)
	if n := p.HostCounters().Madvise - madv; n != 4+2 {
		t.Errorf("a 32 MiB span took %d madvise calls, want the region's THP advice and fork mark and 4 pieces faulted in", n)
	}
	if n := f.Stat(fakecuda.RegisterCalls) - regs; n != 1 {
		t.Errorf("a 32 MiB span took %d registrations, want 1", n)
	}
	if base, size, ok := p.RegistrationOf(s.Base); !ok || base != s.Base || size != 32<<20 {
		t.Errorf("registration of the span: [%#x, +%d) %v", base, size, ok)
	}
	if adv, err := smaps.HugeAdvice(s.Base); err != nil && !errors.Is(err, os.ErrNotExist) || err == nil && adv != "hg" {
		t.Errorf("registered memory advised %q (%v), want transparent huge pages by default", adv, err)
	}
	copyBoth(t, d, s.Base, s.Size)
	must(t, "Free", a.Free(s))
	a.Trim()

	f.SetPinCost(true, 30*time.Millisecond, 0)
	defer f.SetPinCost(false, 0, 0)
	n, err := a.Precommit(16 << 20)
	if err != nil || n != 16<<20 {
		t.Fatalf("Precommit = %d, %v", n, err)
	}
	if m := f.MaxInflight(); m != 4 {
		t.Errorf("Precommit registered %d chunks at once, want 4", m)
	}
	if r := f.Stat(fakecuda.Registrations); r != 8 {
		t.Errorf("Precommit of 8 chunks made %d registrations, want one per chunk", r)
	}
	clean(t, f, d, p, a, "after Precommit")
	a.Trim()
}

// TestFakeRegisterFailureMidway: a registration refused midway through a Precommit batch gives
// back that chunk and keeps the others; refused for a span's commit, it leaves nothing
// registered or faulted in; no sticky error either way.
func TestFakeRegisterFailureMidway(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a := newWorkerArena(t, p, 1<<30, 4)
	f.FailAfter(fakecuda.CallRegister, 3, fakecuda.ResultOutOfMemory)
	n, err := a.Precommit(16 << 20)
	if !errors.Is(err, pinmalloc.ErrOutOfMemory) || !errors.Is(err, arena.ErrCommit) {
		t.Errorf("Precommit with a refused registration = %v", err)
	}
	if st := a.Stats(); n != 7*arena.DefaultChunkSize || st.Precommitted != uint64(n) || st.Committed != uint64(n) {
		t.Errorf("Precommit = %d: precommitted %d, committed %d; want the 7 chunks that registered", n, st.Precommitted, st.Committed)
	}
	clean(t, f, d, p, a, "after the refused precommit")
	a.Trim()

	f.FailAfter(fakecuda.CallRegister, 0, fakecuda.ResultOutOfMemory)
	_, err = a.Alloc(32<<20, 256)
	if !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("Alloc with a refused registration = %v", err)
	}
	clean(t, f, d, p, a, "after the refused span")
	if st := a.Stats(); st.Committed != 0 || p.HostCounters().LockedBytes != 0 {
		t.Errorf("after the refused span: committed %d", st.Committed)
	}
	s, err := a.Alloc(32<<20, 256)
	must(t, "Alloc after the refusal", err)
	copyBoth(t, d, s.Base, s.Size)
	must(t, "Free", a.Free(s))
}
