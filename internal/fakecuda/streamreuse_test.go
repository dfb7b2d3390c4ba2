//go:build cgo && linux

package fakecuda

import "testing"

// TestStreamHandleReuse: cuStreamCreate hands out the handle of the stream destroyed last first,
// destroyed by cuStreamDestroy or with its context (fakedriver.c.in, "Streams"; R: reported for
// cuStreamDestroy), as events do (TestEventHandleReuse). Before its reuse the handle is refused
// as a destroyed stream's: CUDA_ERROR_INVALID_HANDLE, or CUDA_ERROR_INVALID_CONTEXT for its
// context's destruction. Before, the fake never reused the handle of a stream destroyed with
// its context.
func TestStreamHandleReuse(t *testing.T) {
	onFakePrimary(t, 1, func(t *testing.T, p *primaryDriver, f *Driver) {
		const codeInvalidHandle = 400
		retainPush(t, p, 0)
		s1, err := p.StreamCreate()
		must(t, "cuStreamCreate", err)
		must(t, "cuStreamDestroy", p.StreamDestroy(s1))
		answer(t, "cuStreamQuery of a destroyed stream", p.StreamQuery(s1), codeInvalidHandle)
		s2, err := p.StreamCreate()
		must(t, "cuStreamCreate", err)
		if s2 != s1 {
			t.Errorf("the new stream has handle %#x, not the destroyed one's %#x", s2, s1)
		}
		s3, err := p.StreamCreate()
		must(t, "cuStreamCreate", err)
		popRelease(t, p, 0) // destroys s2 and s3 with the context
		reclaimed(t, f, 2)

		retainPush(t, p, 0)
		answer(t, "cuStreamQuery of a destroyed context's stream", p.StreamQuery(s3),
			codeInvalidContext)
		s4, err := p.StreamCreate()
		must(t, "cuStreamCreate in the new context", err)
		s5, err := p.StreamCreate()
		must(t, "cuStreamCreate in the new context", err)
		if s4 != s3 || s5 != s2 {
			t.Errorf("the new context's streams have handles %#x, %#x; want the destroyed "+
				"context's last first, %#x, %#x", s4, s5, s3, s2)
		}
		answer(t, "cuStreamQuery of a reused handle", p.StreamQuery(s3), 0)
		must(t, "cuStreamDestroy", p.StreamDestroy(s4))
		must(t, "cuStreamDestroy", p.StreamDestroy(s5))
		answer(t, "cuStreamDestroy of a destroyed stream", p.StreamDestroy(s5), codeInvalidHandle)
		popRelease(t, p, 0)
		reclaimed(t, f, 0)
	})
}
