package pinned_test

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeQuotaReclaimsLegacyFree: a buffer freed on the legacy default stream (0) is taken
// back by an Alloc the quota refuses once every stream has passed the free. The legacy stream
// is never found idle by a query (its work waits for every blocking stream's, which no query
// sees), so its buffers come back only through an event, recorded by the first reclaim that
// finds them: before the fix that reclaim was the quota refusal's only one, which then refused
// with nothing live and every stream idle (found by internal/streamcheck's legacy mix).
func TestFakeQuotaReclaimsLegacyFree(t *testing.T) {
	const quota = 1 << 20
	r := newAsyncRig(t, pinned.Options{Quota: quota})
	if r == nil {
		return
	}
	b := r.alloc(quota, 7)
	ok(t, "FreeAsync on the legacy stream", r.pool.FreeAsync(b, pcuda.Stream(0)))
	ok(t, "synchronize the context", r.dev.Synchronize())
	c, err := r.pool.Alloc(quota)
	if err != nil {
		t.Fatalf("Alloc of the quota with nothing live and every stream idle: %v", err)
	}
	ok(t, "Free", r.pool.Free(c))
	r.finish()
}
