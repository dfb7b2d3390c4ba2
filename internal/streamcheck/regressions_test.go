package streamcheck

import (
	"runtime"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// regression is a shrunk failing sequence the checker found, replayed as it was found (the
// configurations have one pool shard and no timed purge, so a replay is deterministic).
type regression struct {
	name string
	what string // the failure it showed
	cfg  Config
	ops  []Op
	// oneP replays with GOMAXPROCS 1: a pool with a shard per P (PoolShards 0) then keeps
	// every buffer in one shard, whatever P a driver call returns the goroutine to.
	oneP bool
}

// TestRegressions replays every sequence the checker shrank a failure to; each must pass.
func TestRegressions(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	rig := Rig{F: f, Dev: f.Open(t, 0)}
	for i, c := range append(regressions, handWritten...) {
		t.Run(c.name, func(t *testing.T) {
			if c.oneP {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			}
			res := Replay(rig, c.cfg, c.ops)
			if res.Failure != nil {
				t.Errorf("%v (found as %q): %v\n%s", c.cfg, c.what, res.Failure, Listing(c.ops))
			}
			if i >= len(regressions) && len(res.Ops) != len(c.ops) {
				t.Errorf("%d of the %d operations written by hand applied: the case no longer builds its state\n%s", len(res.Ops), len(c.ops), Listing(res.Ops))
			}
		})
	}
}

// regressions are the shrunk sequences of the failures found on the code before the fixes of issue
// 25 (and, for the legacy mix, before the fix each names) (see the report of the commit that added
// each).
var regressions = []regression{
	{
		// Issue 25 (2): the pool's quota refuses before it reclaims the deferred buffers whose
		// streams have passed (Hold is off: a query runs the work).
		name: "pool quota never reclaims",
		what: "pool quota refused with room",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 4 << 20, DeviceZero: true, DeviceQuota: 3145728, PoolZero: true, PoolQuota: 2097152, PoolShards: 1, TierBudget: 1024 << 10, Mover: copyengine.MethodBatchAPI, PurgeDelay: time.Millisecond},
		ops: []Op{
			{ID: 33, Kind: PoolAlloc, S: 1, A: -1, B: -1, N: 1190238, Off: 0, V: 0xc0ae15d7, Flag: false},
			{ID: 83, Kind: PoolFreeAsync, S: 1, A: 33, B: -1, N: 200599, Off: 24319, V: 0x11b411da, Flag: false},
			{ID: 109, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 923871, Off: 0, V: 0x4b1ad8ea, Flag: false},
		},
	},
	{
		// The same at the end of a run: every stream passed, nothing live, and an Alloc of the
		// whole quota is refused (until something calls Stats).
		name: "pool quota refused with nothing live",
		what: "pool quota refused with nothing live",
		cfg:  Config{Seed: 2, Streams: 3, DeviceCapacity: 4 << 20, DeviceZero: true, DeviceQuota: 3145728, PoolZero: true, PoolQuota: 3145728, PoolShards: 1, TierBudget: 1024 << 10, Mover: copyengine.MethodBatchAPI, PurgeDelay: time.Millisecond},
		ops: []Op{
			{ID: 471, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 68193, V: 1426367088},
			{ID: 476, Kind: PoolFreeAsync, S: 0, A: 471, B: -1},
		},
	},
	{
		// Issue 25 (1): stream 2 frees two blocks on itself (ZeroOnFree queues their scrubs on
		// stream 2), its next Alloc finds the arena full and its heap gives its emptied
		// segment back to the arena with the scrubs still queued; stream 1 takes it, and the
		// scrub of #210 lands on the first 7322 bytes of stream 1's block #293.
		name: "device heap self-trim",
		what: "device block bytes",
		cfg:  Config{Seed: 1795705589568168621, Streams: 3, DeviceCapacity: 6 << 20, DeviceZero: true, DeviceQuota: 0, PoolZero: false, PoolQuota: 0, PoolShards: 1, TierBudget: 1024 << 10, Mover: copyengine.MethodKernel, PurgeDelay: time.Millisecond},
		ops: []Op{
			{ID: 179, Kind: DevAlloc, S: 0, A: -1, B: -1, N: 889251, Off: 0, V: 0x5f779c6e, Flag: true},
			{ID: 209, Kind: DevAlloc, S: 2, A: -1, B: -1, N: 366096, Off: 0, V: 0x22740fd4, Flag: true},
			{ID: 210, Kind: DevAlloc, S: 2, A: -1, B: -1, N: 7322, Off: 0, V: 0xa909b653, Flag: false},
			{ID: 218, Kind: DevFreeAsync, S: 2, A: 210, B: -1, N: 0, Off: 6466, V: 0xa7b9b06e, Flag: false},
			{ID: 220, Kind: Recreate, S: 1, A: -1, B: -1, N: 0, Off: 0, V: 0xe280b6a4, Flag: false},
			{ID: 223, Kind: DevFreeAsync, S: 2, A: 209, B: -1, N: 0, Off: 270143, V: 0xc17869c1, Flag: false},
			{ID: 291, Kind: DevAlloc, S: 2, A: -1, B: -1, N: 118052, Off: 0, V: 0x1a648d9d, Flag: true},
			{ID: 293, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 121836, Off: 0, V: 0xe9b36e5f, Flag: false},
		},
	},
	// Issue 25 (1) with the tier as the victim: stream 1 frees a block on itself (its scrub
	// queued on stream 1), asks for more than a segment, and its heap gives the emptied
	// segment to the arena; the tier restores block #925 (evicted under that Alloc's pressure)
	// into it, and stream 1's scrub then zeroes the tier's block.
	{
		name: "tier block under a self-trimmed segment",
		what: "tier block bytes (acquired for reading)",
		cfg:  Config{Seed: 15, Streams: 3, DeviceCapacity: 6 << 20, DeviceZero: true, DeviceQuota: 4718592, PoolZero: false, PoolQuota: 0, PoolShards: 1, TierBudget: 1024 << 10, Mover: copyengine.MethodKernel, PurgeDelay: -1},
		ops: []Op{
			{ID: 925, Kind: TierAlloc, S: 1, A: -1, B: -1, N: 16484, Off: 0, V: 0xb97d390b, Flag: false},
			{ID: 1935, Kind: TierAcquire, S: 0, A: 925, B: 1807, N: 0, Off: 0, V: 0x909fd08, Flag: true},
			{ID: 3031, Kind: DevAlloc, S: 0, A: -1, B: -1, N: 508672, Off: 0, V: 0x61f894b4, Flag: true},
			{ID: 3036, Kind: DevAlloc, S: 2, A: -1, B: -1, N: 978133, Off: 0, V: 0xa2b8935c, Flag: true},
			{ID: 3268, Kind: TierRelease, S: 0, A: 925, B: -1, N: 0, Off: 0, V: 0x85d45a63, Flag: false},
			{ID: 3270, Kind: Sync, S: 0, A: -1, B: -1, N: 0, Off: 0, V: 0xc34693ec, Flag: false},
			{ID: 3600, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 120725, Off: 0, V: 0xa265cf15, Flag: false},
			{ID: 3610, Kind: DevFreeAsync, S: 1, A: 3600, B: -1, N: 0, Off: 11843, V: 0x81558018, Flag: false},
			{ID: 3612, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 2325331, Off: 0, V: 0x45ad1521, Flag: false},
			{ID: 3615, Kind: TierAcquire, S: 2, A: 925, B: -1, N: 0, Off: 0, V: 0x37c3cdef, Flag: false},
			{ID: 3647, Kind: CompleteStream, S: 1, A: -1, B: -1, N: 0, Off: 0, V: 0x4057ed34, Flag: false},
			{ID: 3651, Kind: TierAcquire, S: 2, A: 925, B: -1, N: 0, Off: 0, V: 0x66ec0526, Flag: false},
		},
	},
	{
		// A quota refusal must take back a buffer recorded on an idle stream and freed. Found
		// on the fixes of issue 25 (wt-device and wt-pinned merged) with several pool shards:
		// the refusal does not reclaim it (one shard passes).
		name: "pool quota with shards",
		what: "pool quota refused with room",
		cfg:  Config{Seed: 102, Streams: 4, DeviceCapacity: 4 << 20, DeviceQuota: 3145728, PoolQuota: 3145728, PoolShards: 4, TierBudget: 1024 << 10, Mover: copyengine.MethodKernel, PurgeDelay: -1},
		ops: []Op{
			{ID: 9675, Kind: PoolAlloc, A: -1, B: -1, N: 1169871, V: 3221156417},
			{ID: 9755, Kind: PoolAlloc, A: -1, B: -1, N: 1012230, V: 3401259559},
			{ID: 9777, Kind: PoolAlloc, A: -1, B: -1, N: 84057, V: 625638866},
			{ID: 9988, Kind: PoolAlloc, A: -1, B: -1, N: 87254, V: 3943577100},
			{ID: 10003, Kind: PoolAlloc, A: -1, B: -1, N: 491280, V: 3063180335},
			{ID: 10022, Kind: PoolRecordFree, S: 3, A: 9777, B: -1, N: 48222, Off: 63485},
			{ID: 10030, Kind: PoolAlloc, A: -1, B: -1, N: 380027, V: 3428353806},
		},
	},
	{
		// The legacy mix: a buffer freed on the legacy default stream (0), which no query
		// finds idle, came back only through the event the quota refusal's one reclaim
		// recorded: the refusal kept it in the quota with every stream idle (hold off). Fixed
		// in pinned (a refusal reclaims twice; TestFakeQuotaReclaimsLegacyFree).
		name: "pool quota with a free on the legacy stream",
		what: "pool quota refused with room",
		cfg:  Config{Seed: 9223372036854775809, Streams: 4, Blocking: 0b1000, Legacy: true, DeviceCapacity: 4 << 20, PoolQuota: 4194304, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 1806, Kind: PoolAlloc, S: 1, A: -1, B: -1, N: 1108720, V: 0x3ae115b7},
			{ID: 1857, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 1082861, V: 0xe0c97b6c},
			{ID: 1877, Kind: PoolAlloc, S: 2, A: -1, B: -1, N: 256733, V: 0x10ac9e6d},
			{ID: 1936, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 507251, V: 0x1c518472},
			{ID: 1950, Kind: PoolAlloc, S: 1, A: -1, B: -1, N: 61002, V: 0x59f40dbc},
			{ID: 1954, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 255024, V: 0x9ab7ec68},
			{ID: 1962, Kind: PoolAlloc, S: 2, A: -1, B: -1, N: 2538, V: 0xb9c2538a},
			{ID: 1987, Kind: PoolAlloc, S: 1, A: -1, B: -1, N: 246795, V: 0xc68f54c5},
			{ID: 2381, Kind: PoolAlloc, S: 0, A: -1, B: -1, N: 81561, V: 0xce89f5c9},
			{ID: 2416, Kind: PoolAlloc, S: 1, A: -1, B: -1, N: 518086, V: 0x6dd8ef86},
			{ID: 2418, Kind: PoolAlloc, S: 4, A: -1, B: -1, N: 2791, V: 0x20fdaf1d},
			{ID: 2426, Kind: PoolRecordFree, S: 4, A: 2416, B: -1, N: 3785, Off: 28319, V: 0x2d752b10},
			{ID: 2436, Kind: PoolAlloc, S: 2, A: -1, B: -1, N: 71888, V: 0xc1ae991},
		},
	},
	{
		// The legacy mix, found with 53e398c's syncLegacyOrder taken out of device.reclaim:
		// blocking stream 2's block is read on the legacy stream (slot 3) and freed on stream
		// 2 (at once: its own stream); Trim synchronizes stream 2 alone, which has nothing of
		// its own queued, gives the segment to the arena and decommits it under the legacy
		// stream's queued read. It passes on the current code.
		name: "device reclaim keeps the legacy order",
		what: "device fault: queued work met memory freed or unmapped under it",
		cfg:  Config{Seed: 14859787877563202341, Streams: 3, Blocking: 0b110, Legacy: true, DeviceCapacity: 4 << 20, DeviceQuota: 3145728, PoolZero: true, PoolQuota: 2097152, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodBatchAPI, PurgeDelay: -1},
		ops: []Op{
			{ID: 2597, Kind: DevAlloc, S: 2, A: -1, B: -1, N: 75864, V: 0x10},
			{ID: 2609, Kind: PoolAlloc, A: -1, B: -1, N: 2248, V: 3338244912},
			{ID: 2614, Kind: DevRead, S: 3, A: 2597, B: 2609, N: 4490, Off: 371},
			{ID: 2616, Kind: PoolFreeAsync, S: 0, A: 2609, B: -1},
			{ID: 2618, Kind: DevFreeAsync, S: 2, A: 2597, B: -1},
			{ID: 2620, Kind: HeapTrim, A: -1, B: -1},
		},
	},
	{
		// The kernel mover's staging ring, its four buffers in flight under Hold (three
		// evictions and three prefetches queued, none run): the next batch must wait for the
		// oldest buffer's launch before writing its jobs there, or that launch, run later,
		// copies the new jobs in place of its own (found on the mutant
		// copyengine-stage-oldest-unwaited, whose ring fills once in the CI run).
		name: "staging ring full under Hold",
		what: "tier block bytes (acquired for reading)",
		cfg:  Config{Seed: 18186795711035311322, Streams: 4, Blocking: 0b1000, Legacy: true, Pressure: true, DeviceCapacity: 4 << 20, DeviceZero: true, DeviceQuota: 0, PoolZero: true, PoolQuota: 0, PoolShards: 1, TierBudget: 256 << 10, TierHostQuota: 393216, Mover: copyengine.MethodKernel, PurgeDelay: -1},
		ops: []Op{
			{ID: 492, Kind: TierAlloc, S: 4, T: 0, A: -1, B: -1, N: 4096, Off: 0, V: 0xf7acca37, Flag: false},
			{ID: 518, Kind: TierAcquire, S: 3, T: 0, A: 492, B: 466, N: 0, Off: 0, V: 0xbdd24920, Flag: true},
			{ID: 606, Kind: TierRelease, S: 3, T: 0, A: 492, B: -1, N: 0, Off: 0, V: 0xdbaf048, Flag: false},
			{ID: 621, Kind: TierAlloc, S: 3, T: 0, A: -1, B: -1, N: 65536, Off: 0, V: 0x7c397a6e, Flag: false},
			{ID: 636, Kind: Hold, S: 0, T: 0, A: -1, B: -1, N: 0, Off: 0, V: 0x64e38f0, Flag: true},
			{ID: 647, Kind: TierEvict, S: 3, T: 0, A: 563, B: 492, N: 0, Off: 492, V: 0x4cf3f9eb, Flag: false},
			{ID: 649, Kind: TierPrefetch, S: 2, T: 0, A: 577, B: 479, N: 0, Off: 621, V: 0x741bc85c, Flag: false},
			{ID: 660, Kind: TierEvict, S: 0, T: 0, A: 621, B: 582, N: 0, Off: 577, V: 0x1b19b5be, Flag: false},
			{ID: 661, Kind: TierPrefetch, S: 1, T: 0, A: 609, B: 479, N: 0, Off: 621, V: 0xb940e7a3, Flag: false},
			{ID: 878, Kind: TierEvict, S: 0, T: 0, A: 750, B: 492, N: 0, Off: 621, V: 0xbf46cce2, Flag: false},
			{ID: 880, Kind: TierPrefetch, S: 2, T: 0, A: 621, B: 563, N: 0, Off: 577, V: 0x99684cf5, Flag: false},
			{ID: 949, Kind: Recreate, S: 3, T: 0, A: -1, B: -1, N: 0, Off: 0, V: 0xc0e46cc0, Flag: false},
			{ID: 955, Kind: TierAcquire, S: 1, T: 0, A: 492, B: -1, N: 0, Off: 0, V: 0xeb7e047c, Flag: false},
		},
	},
	{
		// A block written on s1 and released is evicted under Hold: the copy of its VRAM to
		// its host buffer stays queued on the tier's D2H stream. An Acquire on s0 restores it:
		// the restore must wait for that eviction before it reads the host copy, or it copies
		// the host buffer's zeros to the device (found on the mutant
		// tier-restore-ignores-eviction, which the CI run caught only on its last seed).
		name: "restore reads a host copy its eviction still writes",
		what: "tier block bytes (acquired for reading)",
		cfg:  Config{Seed: 2305843009213693954, Streams: 4, Blocking: 0b0, Legacy: false, Pressure: false, DeviceCapacity: 4 << 20, DeviceZero: true, DeviceQuota: 3145728, PoolZero: true, PoolQuota: 0, PoolShards: 0, TierBudget: 512 << 10, TierHostQuota: 524288, Mover: copyengine.MethodKernel, PurgeDelay: -1},
		ops: []Op{
			{ID: 2511, Kind: TierAlloc, S: 3, T: 0, A: -1, B: -1, N: 65536, Off: 0, V: 0x64edde94, Flag: false},
			{ID: 2633, Kind: TierAcquire, S: 1, T: 0, A: 2511, B: -1, N: 0, Off: 0, V: 0xf5a089c1, Flag: true},
			{ID: 2644, Kind: TierRelease, S: 2, T: 0, A: 2511, B: -1, N: 0, Off: 0, V: 0xf1512264, Flag: false},
			{ID: 2760, Kind: Complete, S: 2, T: 0, A: -1, B: -1, N: 0, Off: 0, V: 0x48c76134, Flag: false},
			{ID: 2821, Kind: Hold, S: 2, T: 0, A: -1, B: -1, N: 0, Off: 0, V: 0x9e9267e, Flag: true},
			{ID: 2844, Kind: TierEvict, S: 2, T: 0, A: 2511, B: 2840, N: 0, Off: 2463, V: 0x35904341, Flag: false},
			{ID: 2860, Kind: TierAcquire, S: 0, T: 0, A: 2511, B: -1, N: 0, Off: 0, V: 0x285c3a8c, Flag: false},
		},
		oneP: true,
	},
	{
		// A block acquired for writing on s2 (its fill queued there) is freed while acquired:
		// the retire of its VRAM must wait for s2's release event before the heap takes the
		// VRAM back, or a device block allocated on s0 gets it and s2's fill, run late, lands
		// on that block (found on the mutant tier-retire-ignores-releases, which the CI run
		// caught only on its last seed).
		name: "retire of a block freed while acquired waits for its stream",
		what: "device block bytes",
		cfg:  Config{Seed: 7028988594927013282, Streams: 4, Blocking: 0b0, Legacy: false, Pressure: true, DeviceCapacity: 4 << 20, DeviceZero: true, DeviceQuota: 0, PoolZero: false, PoolQuota: 0, PoolShards: 1, TierBudget: 512 << 10, TierHostQuota: 786432, Mover: copyengine.MethodKernel, PurgeDelay: -1},
		ops: []Op{
			{ID: 87, Kind: TierAlloc, S: 3, T: 0, A: -1, B: -1, N: 65536, Off: 0, V: 0xbab9a8ba, Flag: false},
			{ID: 170, Kind: TierAcquire, S: 2, T: 0, A: 87, B: -1, N: 0, Off: 0, V: 0x2bd45eab, Flag: true},
			{ID: 175, Kind: TierFree, S: 2, T: 0, A: 87, B: -1, N: 0, Off: 0, V: 0x8da8ef2, Flag: true},
			{ID: 229, Kind: DevAlloc, S: 0, T: 0, A: -1, B: -1, N: 2813534, Off: 0, V: 0x511b9a8, Flag: true},
		},
	},
}

// afterRemoteFree returns the operations that make a buffer freed by a reclaim outside its
// shard's fast path (Stats: a remote free, collected when the page runs out) handed out again:
// sixteen 4 KiB allocations from ID first on (the rest of a page, then the blocks freed), then
// a synchronize of stream slot s, which runs the copy the free should have waited for.
func afterRemoteFree(first, s int) []Op {
	var ops []Op
	for i := range 16 {
		ops = append(ops, Op{ID: first + i, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: uint32(0x40 + i)})
	}
	return append(ops, Op{ID: first + 16, Kind: Sync, S: s, A: -1, B: -1})
}

// handWritten are sequences written by hand for the paths the random runs reach rarely, each
// the shortest that shows its bug (the mutant it catches, mutants_test.go, says which).
var handWritten = []regression{
	{
		// A prefetched block's restore still reads its host copy (Hold keeps it queued) when
		// the tier, its host pool full, looks for host copies to drop for a new block's buffer:
		// dropping that one frees the buffer the restore then copies to the device. The pool
		// clears it as it is freed (PoolZero): the pool need not hand the same buffer to the new
		// block, and the restore would copy intact bytes from a buffer that is no longer the
		// block's.
		name: "host copy dropped under a queued restore",
		what: "tier block bytes (acquired for reading)",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, PoolShards: 1, TierBudget: 512 << 10, TierHostQuota: 128 << 10, Mover: copyengine.MethodPerCopy, PoolZero: true, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: TierAlloc, A: -1, B: -1, N: 64 << 10},
			{ID: 1, Kind: TierHost, A: 0, B: -1, V: 0x11, Flag: true},
			{ID: 2, Kind: TierAlloc, A: -1, B: -1, N: 64 << 10},
			{ID: 3, Kind: TierHost, A: 2, B: -1, V: 0x22, Flag: true},
			{ID: 4, Kind: Hold, A: -1, B: -1, Flag: true},
			{ID: 5, Kind: TierPrefetch, A: 0, B: -1, Off: -1},
			{ID: 6, Kind: TierAlloc, A: -1, B: -1, N: 64 << 10},
			{ID: 7, Kind: TierHost, A: 6, B: -1, V: 0x33, Flag: true},
			{ID: 8, Kind: Hold, A: -1, B: -1},
			{ID: 9, Kind: TierAcquire, A: 0, B: -1},
		},
	},
	{
		// A shard's FreeAsync cache (128 buffers) fills with buffers a raw copy on s0 still
		// writes into (DtoH), and the allocation that finds the class page used up (128 blocks
		// of 512 bytes) takes the full cache back (drainPend): only once a query finds s0
		// idle, which runs the copies first. Without the query the 129th buffer is one of
		// them, and a copy lands on its stamp.
		name: "FreeAsync cache taken back under queued copies",
		what: "pool buffer bytes",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, PoolShards: 0, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: func() []Op {
			ops := []Op{{ID: 0, Kind: DevAlloc, A: -1, B: -1, N: 512, V: 0x5a}}
			for i := 1; i <= 128; i++ {
				ops = append(ops,
					Op{ID: 2 * i, Kind: PoolAlloc, A: -1, B: -1, N: 512, V: uint32(i)},
					Op{ID: 2*i + 1, Kind: PoolRawFree, A: 2 * i, B: 0, N: 512, Flag: true})
			}
			return append(ops, Op{ID: 300, Kind: PoolAlloc, A: -1, B: -1, N: 512, V: 0x77}, Op{ID: 301, Kind: Sync, A: -1, B: -1})
		}(),
		oneP: true,
	},
	{
		// A buffer recorded on s1 by a copy (HtoDAsync) is freed while the stream checked
		// last is s2 (a FreeAsync there): the free must defer it on s1, not on the list found
		// last, or the reclaim that finds s2 idle hands it out under s1's queued copy.
		name: "free of a buffer recorded on another stream than the last checked",
		what: "device block bytes",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, PoolShards: 0, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: append([]Op{
			{ID: 0, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 1, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 2, Kind: DevWrite, S: 1, A: 1, B: 0, N: 4096},
			{ID: 3, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x33},
			{ID: 4, Kind: PoolFreeAsync, S: 2, A: 3, B: -1},
			{ID: 5, Kind: PoolFree, A: 0, B: -1},
			{ID: 6, Kind: Stats, A: -1, B: -1}, // a reclaim: remote frees, collected when the page runs out
		}, afterRemoteFree(7, 1)...),
		oneP: true,
	},
	{
		// The legacy mix: a buffer a blocking stream (slot 0) still copies from is freed on
		// the legacy stream (slot 3), whose work comes after the blocking stream's: no query
		// of the legacy stream alone finds it idle (its own queue is empty: the pool knew the
		// stream before, so it recorded no point there at this free), an event does.
		name: "free on the legacy stream after a blocking stream's copy",
		what: "device block bytes",
		cfg:  Config{Seed: 1, Streams: 3, Blocking: 0b001, Legacy: true, DeviceCapacity: 8 << 20, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: append([]Op{
			{ID: 0, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x10},
			{ID: 1, Kind: PoolFreeAsync, S: 3, A: 0, B: -1},
			{ID: 2, Kind: Sync, S: 3, A: -1, B: -1},
			{ID: 3, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 4, Kind: DevAlloc, S: 0, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 5, Kind: PoolRawFree, S: 0, T: 3, A: 3, B: 4, N: 4096},
			{ID: 6, Kind: Stats, A: -1, B: -1}, // a reclaim: remote frees, collected when the page runs out
		}, afterRemoteFree(7, 0)...),
	},
	{
		// The legacy mix: a block the legacy stream (slot 3) still writes is freed on a
		// blocking stream (slot 0, known to the heap before: no point recorded at the free),
		// whose later work waits for the legacy stream's: the heap's Sync must wait for the
		// legacy stream too before the block goes back, or the legacy memset lands on the block
		// a non-blocking stream (slot 1) takes next.
		name: "heap Sync of a free ordered by the legacy stream",
		what: "device block bytes",
		cfg:  Config{Seed: 1, Streams: 3, Blocking: 0b001, Legacy: true, DeviceCapacity: 8 << 20, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: DevAlloc, S: 0, A: -1, B: -1, N: 4096, V: 0x10},
			{ID: 1, Kind: Sync, S: 0, A: -1, B: -1},
			{ID: 2, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 3, Kind: Sync, S: 1, A: -1, B: -1},
			{ID: 4, Kind: DevMemset, S: 3, A: 2, B: -1, N: 4096, V: 0x22},
			{ID: 5, Kind: DevFreeAsync, S: 0, A: 2, B: -1},
			{ID: 6, Kind: HeapSync, A: -1, B: -1},
			{ID: 7, Kind: DevAlloc, S: 1, A: -1, B: -1, N: 4096, V: 0x33},
			{ID: 8, Kind: Sync, S: 1, A: -1, B: -1},
		},
	},
	{
		// A ZeroOnFree Free scrubs the block with a memset on the legacy stream, which a
		// non-blocking stream does not wait for: the Free must wait for it, or the block, taken
		// again at once by the same stream and filled there, is zeroed when the legacy stream
		// runs (the check's own copy, on the legacy stream, runs it).
		name: "device ZeroOnFree Free waits for its scrub",
		what: "device block bytes",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, DeviceZero: true, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: DevAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 1, Kind: Sync, A: -1, B: -1},
			{ID: 2, Kind: DevFree, A: 0, B: -1},
			{ID: 3, Kind: DevAlloc, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 4, Kind: Sync, A: -1, B: -1},
		},
	},
	{
		// A ZeroOnFree block freed on its stream s0 is taken again at once by the next Alloc
		// there, its old owner's copy out of it (into buffer #1) still queued on s0 (Hold); the new
		// owner frees it on s1, whose memset must wait for s0's work, or it zeroes the block
		// before the copy runs (s1 is run first).
		name: "device ZeroOnFree FreeAsync elsewhere after same-stream reuse",
		what: "pool buffer bytes (an old owner's copy out of a block reused at once)",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, DeviceZero: true, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: DevAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 1, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 2, Kind: Sync, A: -1, B: -1}, // the old owner's bytes in place
			{ID: 3, Kind: Hold, A: -1, B: -1, Flag: true},
			{ID: 4, Kind: DevReuseFree, S: 0, T: 1, A: 0, B: 1},
		},
	},
	{
		// The same with the legacy stream (slot 3) as the block's, which a non-blocking stream's
		// memset is not ordered after either.
		name: "device ZeroOnFree FreeAsync elsewhere after legacy reuse",
		what: "pool buffer bytes (an old owner's copy out of a block reused at once)",
		cfg:  Config{Seed: 1, Streams: 3, Blocking: 0b001, Legacy: true, DeviceCapacity: 8 << 20, DeviceZero: true, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: DevAlloc, S: 3, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 1, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 2, Kind: Sync, S: 3, A: -1, B: -1}, // the old owner's bytes in place
			{ID: 3, Kind: Hold, A: -1, B: -1, Flag: true},
			{ID: 4, Kind: DevReuseFree, S: 3, T: 1, A: 0, B: 1},
		},
	},
	{
		// The same freed by the new owner with Free: its memset, on the legacy stream, must
		// wait for s0's work too.
		name: "device ZeroOnFree Free after same-stream reuse",
		what: "pool buffer bytes (an old owner's copy out of a block reused at once)",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, DeviceZero: true, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: DevAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 1, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 2, Kind: Sync, A: -1, B: -1}, // the old owner's bytes in place
			{ID: 3, Kind: Hold, A: -1, B: -1, Flag: true},
			{ID: 4, Kind: DevReuseFree, S: 0, T: 1, A: 0, B: 1, Flag: true},
		},
	},
	{
		// The legacy mix, the blind spot of issue 37: a raw copy on the legacy stream (slot 3)
		// reads a buffer freed on a blocking stream (slot 0, known to the pool before, with
		// nothing of its own queued): the free waits for the legacy stream's earlier work, so
		// the blocking stream is idle only with the legacy stream idle too.
		name: "free on a blocking stream after a legacy stream's copy",
		what: "device block bytes",
		cfg:  Config{Seed: 1, Streams: 3, Blocking: 0b001, Legacy: true, DeviceCapacity: 8 << 20, PoolShards: 1, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: append([]Op{
			{ID: 0, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x10},
			{ID: 1, Kind: PoolFreeAsync, S: 0, A: 0, B: -1},
			{ID: 2, Kind: Sync, S: 0, A: -1, B: -1},
			{ID: 3, Kind: PoolAlloc, A: -1, B: -1, N: 4096, V: 0x11},
			{ID: 4, Kind: DevAlloc, S: 3, A: -1, B: -1, N: 4096, V: 0x22},
			{ID: 5, Kind: PoolRawFree, S: 3, T: 0, A: 3, B: 4, N: 4096},
			{ID: 6, Kind: Stats, A: -1, B: -1}, // a reclaim: remote frees, collected when the page runs out
		}, afterRemoteFree(7, 3)...),
	},
	{
		// A quota refusal with nothing on the lists must take back what a shard's FreeAsync
		// cache holds (a small buffer recorded on an idle stream and freed): it refused with
		// every stream idle and nothing live.
		name: "pool quota with a buffer in a FreeAsync cache",
		what: "pool quota refused with room",
		cfg:  Config{Seed: 1, Streams: 3, DeviceCapacity: 8 << 20, PoolQuota: 64 << 10, PoolShards: 0, TierBudget: 512 << 10, Mover: copyengine.MethodPerCopy, PurgeDelay: -1},
		ops: []Op{
			{ID: 0, Kind: PoolAlloc, A: -1, B: -1, N: 8 << 10, V: 0x11},
			{ID: 1, Kind: PoolRecordFree, S: 0, A: 0, B: -1, N: 8 << 10},
			{ID: 2, Kind: PoolAlloc, A: -1, B: -1, N: 60000, V: 0x22},
		},
		oneP: true,
	},
}
