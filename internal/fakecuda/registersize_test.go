package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// A registration of 512 GiB or more is refused, as drivers from r580 on refuse it; one just
// one is taken (its pages mapped, read but never written).
func TestRegisterSizeLimit(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const limit = 512 << 30
	b, err := unix.Mmap(-1, 0, limit, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Skipf("no 512 GiB of address space: %v", err)
	}
	defer unix.Munmap(b)
	p := mem.Addr(b)
	wantErr(t, "MemHostRegister of 512 GiB", d.MemHostRegister(p, limit, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemHostRegister of 4 GiB", d.MemHostRegister(p, 4<<30, 0))
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
}
