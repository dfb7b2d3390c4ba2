package copyengine

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestForeignDestroyedStreamRefused: a stream the Batcher checked and remembers, destroyed
// through another binding of the driver (package cuda's count of destroys does not see it), is
// refused by the driver at the next Copy: as a handle no stream has, and, once the driver gives
// the handle to a stream of another device, by the launch of the kernel there. Copy's error
// must match ErrInvalidStream, as it does for a stream destroyed through package cuda, and the
// Batcher must ask the stream's context again. Before, Copy returned the driver's bare refusal
// (CUDA_ERROR_INVALID_HANDLE, no sentinel of the package). A copy method on the handle given to
// another device's stream is not refused by the driver: see the package comment.
func TestForeignDestroyedStreamRefused(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev, dev1 := f.Open(t, 0), f.Open(t, 1)
	const n = 4096
	src, dst := hostMem(t, dev, n), hostMem(t, dev, n)
	for _, c := range []struct {
		o      Options
		reused bool // the handle given to device 1's new stream before the Copy
	}{
		{Options{Method: MethodPerCopy}, false},
		{Options{Method: MethodBatchAPI}, false},
		{Options{Method: MethodKernel}, false},
		{Options{Method: MethodKernel, LowPriority: true}, false},
		{Options{Method: MethodKernel}, true},
		{Options{Method: MethodKernel, LowPriority: true}, true},
	} {
		b := newBatcher(t, dev, c.o)
		s, err := f.ForeignStreamCreate(dev)
		must(t, "cuStreamCreate through another binding", err)
		must(t, "Copy", b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		must(t, "cuStreamDestroy through another binding", f.ForeignStreamDestroy(dev, s))
		on := s
		if c.reused {
			s1, err := dev1.StreamCreate(true)
			must(t, "StreamCreate on device 1", err)
			if s1 != s {
				t.Fatalf("device 1's new stream %#x did not get the destroyed stream's handle %#x", s1, s)
			}
			defer func() { must(t, "StreamDestroy", dev1.StreamDestroy(s1)) }()
		}
		err = b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(on))
		if !errors.Is(err, ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrInvalidHandle) {
			t.Errorf("%+v, handle reused %v: Copy on a stream destroyed through another binding: %v, want ErrInvalidStream and the driver's refusal",
				c.o, c.reused, err)
		}
		asks := f.Stat(fakecuda.StreamContextAsks)
		_ = b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(on))
		if f.Stat(fakecuda.StreamContextAsks) == asks {
			t.Errorf("%+v, handle reused %v: the next Copy on the refused stream did not ask its context again", c.o, c.reused)
		}
	}
}
