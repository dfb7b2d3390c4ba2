package fakecuda

import (
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Pool reservation (fakedriver.c.in, "Memory pools"): one rule per function of poolRules, each
// failing on a fake without it, run on the fake by a test of its own (TestPool...) and on a GPU
// by TestCUDAPoolRules (scripts/gpucheck runs it), where each answer of the driver is logged
// and one that differs from the fake's fails the rule's subtest saying what the driver answered.

// The fake's figures for a device pool (fakedriver.c.in, POOL_CHUNK and POOL_UNIT): what a
// device pool reserves at a time, and what one allocation counts in its used bytes at least.
const (
	poolChunk = 32 << 20
	poolUnit  = 512
)

// poolRules are the rules of a pool's reservation the fake models, each a function of a device:
// the fake's (TestPool...) or a GPU's (TestCUDAPoolRules).
var poolRules = []struct {
	name string
	rule func(*testing.T, *cuda.Device)
}{
	{"Reservation", poolReservation},
}

// TestCUDAPoolRules checks each rule of poolRules on device 0 of the real driver, one subtest
// per rule; it skips only where there is no driver or no device (GPU).
func TestCUDAPoolRules(t *testing.T) {
	d := GPU(t, 0)
	for _, c := range poolRules {
		t.Run(c.name, func(t *testing.T) { c.rule(t, d) })
	}
}

// poolFigure logs what the driver answered for attribute attr of pool p and fails the rule
// unless it is want.
func poolFigure(t *testing.T, d *cuda.Device, p cuda.MemPool, what string, attr cuda.MemPoolAttr,
	want uint64) {
	t.Helper()
	v, err := d.MemPoolGetAttribute(p, attr)
	must(t, "MemPoolGetAttribute", err)
	t.Logf("driver: %s = %d", what, v)
	if v != want {
		t.Errorf("%s = %d, want %d", what, v, want)
	}
}

// TestPoolReservation: a device pool reserves its memory in chunks of 32 MiB and carves its
// allocations from them (CuPy's observation of the driver, cupy/cupy#5177 and the notes of
// MemoryAsyncPool in cupy/cuda/memory.pyx): after a 12-byte allocation from a new pool the
// reserved bytes are one chunk and the used bytes the allocation rounded up to 512 B; a second
// one takes no more reserved memory; one bigger than a chunk reserves whole chunks; a chunk
// with a live allocation in it stays at cuMemPoolTrimTo(0); once everything is freed and the
// stream synchronized, a release threshold of UINT64_MAX keeps the chunks and a trim to 0
// releases them all.
func TestPoolReservation(t *testing.T) { onFake(t, poolReservation) }

func poolReservation(t *testing.T, d *cuda.Device) {
	loc := cuda.MemLocation{Type: cuda.LocationDevice, ID: int32(d.Ordinal())}
	p, err := d.MemPoolCreate(cuda.MemPoolProps{Location: loc})
	must(t, "MemPoolCreate", err)
	defer func() { must(t, "MemPoolDestroy", d.MemPoolDestroy(p)) }()
	must(t, "MemPoolSetAttribute(threshold max)",
		d.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, math.MaxUint64))
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	alloc := func(n uintptr) cuda.DevicePtr {
		q, err := d.MemAllocFromPoolAsync(n, p, s)
		must(t, "MemAllocFromPoolAsync", err)
		return q
	}
	free := func(q cuda.DevicePtr) { must(t, "MemFreeAsync", d.MemFreeAsync(q, s)) }
	sync := func() { must(t, "StreamSynchronize", d.StreamSynchronize(s)) }
	trim := func() { must(t, "MemPoolTrimTo(0)", d.MemPoolTrimTo(p, 0)) }
	reserved := func(what string, want uint64) {
		t.Helper()
		poolFigure(t, d, p, "reserved "+what, cuda.PoolAttrReservedMemCurrent, want)
	}
	used := func(what string, want uint64) {
		t.Helper()
		poolFigure(t, d, p, "used "+what, cuda.PoolAttrUsedMemCurrent, want)
	}

	a := alloc(12)
	reserved("after a 12-byte allocation", poolChunk)
	used("after a 12-byte allocation", poolUnit)
	b := alloc(12)
	reserved("after two 12-byte allocations", poolChunk)
	used("after two 12-byte allocations", 2*poolUnit)
	if b == a {
		t.Errorf("two live allocations at %#x", a)
	}
	c := alloc(poolChunk + 1)
	reserved("after a further allocation of a chunk and a byte", 3*poolChunk)
	poolFigure(t, d, p, "reserved high", cuda.PoolAttrReservedMemHigh, 3*poolChunk)
	poolFigure(t, d, p, "used high", cuda.PoolAttrUsedMemHigh, 3*poolUnit+poolChunk)
	free(c)
	free(a)
	sync()
	trim()
	reserved("after a trim to 0 with one allocation live", poolChunk)
	used("with one allocation live", poolUnit)
	free(b)
	sync()
	reserved("with nothing live, threshold UINT64_MAX", poolChunk)
	used("with nothing live", 0)
	trim()
	reserved("after a trim to 0 with nothing live", 0)
}
