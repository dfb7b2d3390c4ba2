package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// cuMemHostRegister pins every page: a range with one PROT_NONE page inside is refused
// (CUDA_ERROR_INVALID_VALUE) and nothing is registered; the same range readable again
// registers. Before, the fake looked at one byte every 64 KiB and the last: a page between
// was taken.
func TestRegisterInaccessiblePage(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 256 << 10
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	hole := b[3<<12 : 4<<12] // the fourth page: no multiple of 64 KiB, not the last
	must(t, "Mprotect", unix.Mprotect(hole, unix.PROT_NONE))
	p := mem.Addr(b)
	wantErr(t, "MemHostRegister over a PROT_NONE page", d.MemHostRegister(p, n, 0),
		pinmalloc.ErrInvalidValue)
	if k := f.Stat(Registrations); k != 0 {
		t.Fatalf("%d registrations after the refusal, want 0", k)
	}
	must(t, "Mprotect", unix.Mprotect(hole, unix.PROT_READ|unix.PROT_WRITE))
	must(t, "MemHostRegister", d.MemHostRegister(p, n, 0))
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
}
