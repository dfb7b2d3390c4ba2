//go:build cgo && linux

package fakecuda

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestDestroyedStreamsLeaveTheList: the fake keeps a destroyed stream's object (for the events
// recorded on it and the refusals of its handle) but takes it out of the list of streams that
// every synchronize walks once its work has run: at its destroy when nothing is queued on it,
// else when its last operation runs, which the destroy does not skip. The pools are listed
// apart, for the trim that every context synchronize makes. Before, every stream and pool ever
// made stayed in the lists those calls walked: after 160,000 streams created and destroyed, a
// cuStreamSynchronize and a cuCtxSynchronize took 12 ms together (0.5 us before any; 0.5 us
// after, now).
func TestDestroyedStreamsLeaveTheList(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	base := f.listed(false)
	for range 1000 {
		s, err := d.StreamCreate(true)
		must(t, "StreamCreate", err)
		must(t, "StreamDestroy", d.StreamDestroy(s))
	}
	if n := f.listed(false); n != base {
		t.Fatalf("%d streams listed after 1,000 were created and destroyed, want %d", n, base)
	}

	// Work queued on a stream destroyed before it ran: listed until it has run, and it runs.
	const n = 4096
	dp, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dp)) }()
	host, err := d.MemHostAlloc(n, 0)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d.MemFreeHost(host)) }()
	must(t, "MemsetD8", d.MemsetD8(dp, 0, n))
	must(t, "Synchronize", d.Synchronize()) // (a memset of device memory may run late)
	f.Hold(true)
	defer f.Hold(false)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "MemsetD8Async", d.MemsetD8Async(dp, 0xab, n, s))
	must(t, "StreamDestroy", d.StreamDestroy(s))
	if got := f.listed(false); got != base+1 || f.Pending() != 1 {
		t.Fatalf("a stream destroyed with its work queued: %d listed (want %d), %d pending (want 1)",
			got, base+1, f.Pending())
	}
	must(t, "Synchronize", d.Synchronize())
	if got := f.listed(false); got != base || f.Pending() != 0 {
		t.Fatalf("after the synchronize: %d listed (want %d), %d pending (want 0)", got, base, f.Pending())
	}
	must(t, "MemcpyDtoH", d.MemcpyDtoH(host, dp, n))
	if !bytes.Equal(mem.Bytes(host, n), bytes.Repeat([]byte{0xab}, n)) {
		t.Fatal("the work of the destroyed stream did not run")
	}

	// Pools: listed while they live (the default pool made at first use stays).
	pools := f.listed(true)
	loc := cuda.MemLocation{Type: cuda.LocationDevice, ID: int32(d.Ordinal())}
	var ps []cuda.MemPool
	for range 3 {
		p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: loc})
		must(t, "MemPoolCreate", err)
		ps = append(ps, p)
	}
	if got := f.listed(true); got != pools+3 {
		t.Fatalf("%d pools listed with 3 more created, want %d", got, pools+3)
	}
	for _, p := range ps {
		must(t, "MemPoolDestroy", d.MemPoolDestroy(p))
	}
	if got := f.listed(true); got != pools {
		t.Fatalf("%d pools listed once the 3 were destroyed, want %d", got, pools)
	}
}
