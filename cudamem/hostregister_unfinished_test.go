package cudamem_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeHostRegisterDecommitUnfinished: a purge whose decommit of registered memory fails
// after the registration is undone (the madvise that drops the pages refused: the test has
// locked them, and the kernel does not drop locked pages) leaves the memory uncommitted in the
// arena's count too, and an Alloc there registers it again. Before, the arena kept it as
// committed: counted pinned while no registration held it, and handed out again unregistered.
func TestFakeHostRegisterDecommitUnfinished(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a := newArena(t, p, 16<<20)
	s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	must(t, "Free", a.Free(s))
	b := mem.Bytes(s.Base, s.Size)
	must(t, "mlock", unix.Mlock(b)) // MADV_DONTNEED refuses locked pages (EINVAL)
	a.Trim()
	must(t, "munlock", unix.Munlock(b))
	if n, st := f.Stat(fakecuda.Registrations), a.Stats(); n != 0 || st.Committed != 0 || p.Counters().Committed != 0 {
		t.Fatalf("after a purge whose madvise failed: %d registrations, the arena counts %d bytes committed, the provider %+v",
			n, st.Committed, p.Counters())
	}
	s, err = a.Alloc(2<<20, arena.DefaultChunkSize)
	must(t, "Alloc again", err)
	if _, _, ok := p.RegistrationOf(s.Base); !ok || f.Stat(fakecuda.Registrations) != 1 {
		t.Errorf("the span allocated again is not registered (%d registrations)", f.Stat(fakecuda.Registrations))
	}
	copyBoth(t, d, s.Base, s.Size)
	must(t, "Free", a.Free(s))
}
