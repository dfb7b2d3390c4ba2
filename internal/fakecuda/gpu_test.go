package fakecuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// verdictTB records how GPU ended a test: skipped or failed, with the message.
type verdictTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (v *verdictTB) Helper() {}
func (v *verdictTB) Skipf(format string, args ...any) {
	v.skipped, v.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (v *verdictTB) Fatalf(format string, args ...any) {
	v.failed, v.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// gpuVerdict runs GPU for device 0 and says how it ended the test.
func gpuVerdict(t *testing.T) *verdictTB {
	v := &verdictTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		GPU(v, 0)
	}()
	<-done
	return v
}

// TestRealDeviceSkipsOnlyWithoutOne checks GPU's rule (issue 26): a test that needs a GPU skips
// only where the driver does not load or finds no device; any other error of cuda.Open (a missing
// entry point, out of memory, a device the driver cannot use) fails it, so that a broken GPU
// machine cannot turn every GPU test into a skip.
func TestRealDeviceSkipsOnlyWithoutOne(t *testing.T) {
	t.Setenv(childEnv, "")
	saved := openDevice
	defer func() { openDevice = saved }()
	for _, c := range []struct {
		err  error
		skip bool
		word string
	}{
		{fmt.Errorf("cuda: dlopen libcuda.so.1: %w", pinmalloc.ErrNoDriver), true, "no CUDA driver"},
		{fmt.Errorf("cuda: cuDeviceGet(0): %w", pinmalloc.ErrNoDevice), true, "no CUDA device"},
		{fmt.Errorf("cuda: cuDevicePrimaryCtxRetain: %w", pinmalloc.ErrOutOfMemory), false, "does not open"},
		{fmt.Errorf("cuda: cuMemPoolCreate: %w", pinmalloc.ErrSymbol), false, "does not open"},
		{errors.New("cuda: CUDA_ERROR_UNKNOWN"), false, "does not open"},
	} {
		openDevice = func(int) (*cuda.Device, error) { return nil, c.err }
		v := gpuVerdict(t)
		if v.skipped != c.skip || v.failed == c.skip || !strings.Contains(v.msg, c.word) {
			t.Errorf("open error %q: skipped %v, failed %v (%q); want skipped %v saying %q", c.err, v.skipped, v.failed, v.msg, c.skip, c.word)
		}
	}
}

// TestRealDeviceSkipsOnTheRenamedFake: a process whose driver is the fake, named after a real GPU
// (NameEnv) and not marked as a fakecuda child, gets no GPU from GPU: the test skips with "no
// CUDA driver", as the fake is known by its marker symbol, not its name.
func TestRealDeviceSkipsOnTheRenamedFake(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Setenv(NameEnv, "NVIDIA H200")
	}
	if Run(t) == nil {
		return
	}
	t.Setenv(childEnv, "") // as a GPU test run with cuda.LibraryEnv at the fake would be
	v := gpuVerdict(t)
	if !v.skipped || !strings.Contains(v.msg, "no CUDA driver") || !strings.Contains(v.msg, "NVIDIA H200") {
		t.Errorf("GPU on the fake named NVIDIA H200: skipped %v, failed %v (%q); want a skip saying no CUDA driver", v.skipped, v.failed, v.msg)
	}
}
