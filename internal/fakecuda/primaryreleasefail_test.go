//go:build cgo && linux

package fakecuda

import "testing"

// TestFailAfterPrimaryRelease: FailAfter makes cuDevicePrimaryCtxRelease fail once, changing
// nothing: the retain stays held, the context alive with what it holds (no destruction), and
// the same release again gives the retain back, the last one destroying the context.
func TestFailAfterPrimaryRelease(t *testing.T) {
	onFakePrimary(t, 1, func(t *testing.T, p *primaryDriver, f *Driver) {
		retainPush(t, p, 0)
		dp, err := p.MemAlloc(4096)
		must(t, "cuMemAlloc", err)
		f.FailAfter(CallPrimaryRelease, 0, codeInvalidContext)
		wantCode(t, "cuDevicePrimaryCtxRelease made to fail", p.Release(0), codeInvalidContext)
		if n := f.Retains(0); n != 1 {
			t.Errorf("%d retains after a refused release, want 1", n)
		}
		reclaimed(t, f, 0)
		must(t, "cuMemsetD8 in the context a refused release left", p.MemsetD8(dp, 7, 4096))
		must(t, "cuMemFree", p.MemFree(dp))
		popRelease(t, p, 0) // the release again: the last retain
		if n := f.Retains(0); n != 0 {
			t.Errorf("%d retains after the release again, want 0", n)
		}
		reclaimed(t, f, 0)
	})
}
