package cuda_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeErrorNamesItsCode: a failed driver call's message says which CUresult it was, by the
// name cuda.h gives it or, for a code the driver does not know, by its number. The driver names
// every code it knows and refuses to name the others (cuGetErrorName: CUDA_ERROR_INVALID_VALUE
// and no text), which sends Result to its own table. The fake named every code it did not know
// "CUDA_ERROR_FAKE", so a message of a test on it lost the code: Open of a missing ordinal said
// "CUDA_ERROR_FAKE: fake driver error", and so did an injected failure of any code.
func TestFakeErrorNamesItsCode(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(1)
	_, err := cuda.Open(1)
	if code, _ := cuda.ResultCode(err); !errors.Is(err, cuda.ErrNoDevice) || code != 101 ||
		!strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE") {
		t.Errorf("Open(1) of 1 device = %v (code %d); want ErrNoDevice, 101, named", err, code)
	}

	dev := open(t, 0)
	in, err := icuda.Of(dev)
	must(t, "Of", err)
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	must(t, "mmap", err)
	t.Cleanup(func() { _ = unix.Munmap(b) })
	addr := mem.Addr(b)
	for _, c := range []struct {
		code int
		text string
	}{
		{999, "CUDA_ERROR_UNKNOWN"}, // named by the driver
		{710, "CUDA_ERROR_ASSERT"},  // named by Result's table
		{12345, "12345"},            // in no table: the number
	} {
		f.FailRegister(1, c.code)
		err := in.MemHostRegister(addr, 4096, 0)
		if err == nil {
			_ = in.MemHostUnregister(addr)
		}
		if code, _ := cuda.ResultCode(err); code != c.code || !strings.Contains(fmt.Sprint(err), c.text) {
			t.Errorf("MemHostRegister failed with code %d: %v (code %d); want it to say %q",
				c.code, err, code, c.text)
		}
	}
}
