//go:build cgo && linux

package fakecuda

import "testing"

// TestEventHandleReuse: cuEventCreate hands out the handle of the event destroyed last first,
// destroyed by cuEventDestroy or with its context (fakedriver.c.in, "Events"; UNMEASURED on a
// GPU, plausible): a use of a stale handle reaches the new event, as on a driver whose handles
// are its freed objects' addresses. Before its reuse the handle is refused as a destroyed
// event's: CUDA_ERROR_INVALID_HANDLE, or CUDA_ERROR_INVALID_CONTEXT for its context's
// destruction. Before, the fake never reused the handle of an event destroyed with its
// context, and reused a destroyed one's only where the C allocator happened to.
func TestEventHandleReuse(t *testing.T) {
	onFakePrimary(t, 1, func(t *testing.T, p *primaryDriver, f *Driver) {
		const codeInvalidHandle = 400
		retainPush(t, p, 0)
		e1, err := p.EventCreate()
		must(t, "cuEventCreate", err)
		must(t, "cuEventDestroy", p.EventDestroy(e1))
		answer(t, "cuEventQuery of a destroyed event", p.EventQuery(e1), codeInvalidHandle)
		e2, err := p.EventCreate()
		must(t, "cuEventCreate", err)
		if e2 != e1 {
			t.Errorf("the new event has handle %#x, not the destroyed one's %#x", e2, e1)
		}
		e3, err := p.EventCreate()
		must(t, "cuEventCreate", err)
		popRelease(t, p, 0) // destroys e2 and e3 with the context
		reclaimed(t, f, 2)

		retainPush(t, p, 0)
		answer(t, "cuEventQuery of a destroyed context's event", p.EventQuery(e3), codeInvalidContext)
		e4, err := p.EventCreate()
		must(t, "cuEventCreate in the new context", err)
		e5, err := p.EventCreate()
		must(t, "cuEventCreate in the new context", err)
		if e4 != e3 || e5 != e2 {
			t.Errorf("the new context's events have handles %#x, %#x; want the destroyed "+
				"context's last first, %#x, %#x", e4, e5, e3, e2)
		}
		answer(t, "cuEventQuery of a reused handle", p.EventQuery(e3), 0)
		must(t, "cuEventDestroy", p.EventDestroy(e4))
		must(t, "cuEventDestroy", p.EventDestroy(e5))
		answer(t, "cuEventDestroy of a destroyed event", p.EventDestroy(e5), codeInvalidHandle)
		popRelease(t, p, 0)
		reclaimed(t, f, 0)
	})
}
