package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Read-only memory registers only with CU_MEMHOSTREGISTER_READ_ONLY (documented), which the
// fake's devices do not support (READ_ONLY_HOST_REGISTER_SUPPORTED 0: CUDA_ERROR_NOT_SUPPORTED):
// without the flag it is CUDA_ERROR_INVALID_VALUE, with it CUDA_ERROR_NOT_SUPPORTED. A range
// that is read-only in one page only is refused too, and a writable one still registers.
// Before, read-only memory registered without the flag.
func TestRegisterReadOnly(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 << 10
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	p := mem.Addr(b)
	wantErr(t, "MemHostRegister of read-only memory", d.MemHostRegister(p, n, 0),
		pinmalloc.ErrInvalidValue)
	wantErr(t, "MemHostRegister of read-only memory, READ_ONLY",
		d.MemHostRegister(p, n, cuda.HostRegisterReadOnly), pinmalloc.ErrNotSupported)
	must(t, "Mprotect", unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE))
	must(t, "Mprotect", unix.Mprotect(b[n-4096:], unix.PROT_READ)) // the last page only
	wantErr(t, "MemHostRegister with a read-only last page", d.MemHostRegister(p, n, 0),
		pinmalloc.ErrInvalidValue)
	if k := f.Stat(Registrations); k != 0 {
		t.Fatalf("%d registrations after the refusals, want 0", k)
	}
	must(t, "Mprotect", unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE))
	must(t, "MemHostRegister", d.MemHostRegister(p, n, 0))
	must(t, "MemHostUnregister", d.MemHostUnregister(p))
}
