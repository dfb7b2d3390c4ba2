package streamcheck

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/pinmalloc/pinmalloc/copyengine"
	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Config is one run's setting, drawn from its seed (ConfigFor).
type Config struct {
	Seed           uint64
	Streams        int               // user streams (non-blocking unless Blocking says otherwise)
	Blocking       uint32            // with Legacy, the user streams (bit k: slot k) created blocking
	Legacy         bool              // the legacy mix: a slot after the user streams for the legacy default stream (0), and Blocking
	DeviceCapacity uintptr           // the device heap's capacity: small, so reclaim and trim run constantly
	DeviceZero     bool              // device.Options.ZeroOnFree
	DeviceQuota    uintptr           // device.Options.Quota (0: none)
	PoolZero       bool              // pinned.Options.ZeroOnFree, of the pool and of the tier's (TierHostQuota)
	PoolQuota      int64             // pinned.Options.Quota (0: none)
	PoolShards     int               // pinned.Options.Shards (1: every operation takes the holder path)
	Pressure       bool              // the device pressure profile: a small, full heap churned on every stream (DevicePressure)
	TierBudget     uintptr           // uvm.Options.DeviceBudget, its VRAM taken from the device heap
	TierHostQuota  int64             // the tier's host buffers from a pool of their own with this quota (uvm.Options.HostPool; 0: the tier's own pool)
	Mover          copyengine.Method // the tier's copyengine.Batcher's method: fixed, so that a replay moves the same way
	PurgeDelay     time.Duration
}

// ConfigFor draws a configuration from seed: every combination of the guards comes up.
func ConfigFor(seed uint64) Config {
	r := newRand(seed, 1)
	c := Config{
		Seed:           seed,
		Streams:        3 + r.IntN(2),
		DeviceCapacity: uintptr(4+2*r.IntN(3)) << 20,
		DeviceZero:     r.IntN(3) != 0, // a scrub queued on every free: pending work on every freed block
		PoolZero:       r.IntN(2) == 0,
		PoolShards:     1,
		TierBudget:     uintptr(512+512*r.IntN(2)) << 10,
		PurgeDelay:     -1,
	}
	if r.IntN(2) == 0 {
		c.DeviceQuota = c.DeviceCapacity * 3 / 4
	}
	if r.IntN(2) == 0 {
		c.PoolQuota = int64(2+r.IntN(3)) << 20
	}
	if r.IntN(3) == 0 {
		c.PoolShards = 0 // one per P: the fast path (less reproducible: a goroutine may change P)
	}
	if r.IntN(4) == 0 {
		c.PurgeDelay = time.Millisecond
	}
	c.Mover = []copyengine.Method{copyengine.MethodKernel, copyengine.MethodBatchAPI, copyengine.MethodPerCopy}[r.IntN(3)]
	// The profiles, each drawn apart, so that everything above is what the seed without its
	// bit draws.
	if seed&LegacyMix != 0 {
		r := newRand(seed, 3)
		c.Legacy = true
		for c.Blocking == 0 || c.Blocking == 1<<c.Streams-1 { // some of each
			c.Blocking = uint32(r.IntN(1 << c.Streams))
		}
	}
	if seed&DevicePressure != 0 {
		r := newRand(seed, 4)
		c.Pressure = true
		c.Streams = 4
		c.DeviceCapacity = 4 << 20
		c.DeviceZero = true // every free queues a scrub: pending work on every freed block
		c.DeviceQuota = 0
		c.TierBudget = uintptr(256+256*r.IntN(2)) << 10
	}
	if seed&HostPressure != 0 {
		r := newRand(seed, 5)
		c.TierHostQuota = int64(c.TierBudget) * int64(2+r.IntN(2)) / 2 // 1 to 1.5 budgets
	}
	return c
}

// The bits of a seed that ask for a profile: seeds below them draw what they always drew.
// Random seeds (-seeds, -long) have each half the time.
const (
	// LegacyMix asks for the legacy mix (Config.Legacy): some user streams blocking, and
	// operations on the legacy default stream too, frees ordered by the legacy stream alone
	// (PoolRawFree from it to a blocking stream) among them.
	LegacyMix = 1 << 63
	// DevicePressure asks for a small device heap kept full by allocations and same-stream
	// frees on every stream, with a scrub queued on each free (Config.Pressure): the
	// conditions under which a stream heap that gave its memory away behind its stream's
	// queued work (a self-trim) is found.
	DevicePressure = 1 << 62
	// HostPressure asks for the tier's host buffers from a pool of their own whose quota holds
	// one to one and a half budgets (Config.TierHostQuota): evictions meet a full pool and drop
	// the host copies of clean blocks, some of which a restore may still be reading.
	HostPressure = 1 << 61
)

func (c Config) String() string {
	legacy := ""
	if c.Legacy {
		legacy = fmt.Sprintf(" legacy{slot=%d blocking=%0*b}", c.Streams, c.Streams, c.Blocking)
	}
	if c.Pressure {
		legacy += " pressure"
	}
	return fmt.Sprintf("seed=%d streams=%d%s device{capacity=%dMiB zero=%v quota=%d} pool{zero=%v quota=%d shards=%d} tier{budget=%dKiB host-quota=%d mover=%v} purge=%v",
		c.Seed, c.Streams, legacy, c.DeviceCapacity>>20, c.DeviceZero, c.DeviceQuota, c.PoolZero, c.PoolQuota, c.PoolShards, c.TierBudget>>10, c.TierHostQuota, c.Mover, c.PurgeDelay)
}

// limits of what the generator keeps live.
const (
	maxDevBlocks  = 24
	maxPoolBufs   = 32
	maxTierBlocks = 16
	poolCapacity  = 64 << 20
	maxPoolLive   = 12 << 20 // live plus possibly deferred pool bytes
)

// dblock is a device block the user allocated.
type dblock struct {
	p      pubcuda.DevicePtr
	n      int
	alloc  int // the stream slot it was allocated on
	want   []byte
	busy   int    // the stream slot that may have work on it, or -1
	busyAt uint64 // the mark of that work in busy (order.go)
}

// pbuf is a pool buffer.
type pbuf struct {
	b      []byte
	want   []byte
	busy   int
	busyAt uint64
}

// ublock is a tier block.
type ublock struct {
	h      uvm.Handle
	n      int
	want   []byte // nil until first written
	acq    int    // the stream slot it is acquired on, or -1
	pins   int
	ptr    pubcuda.DevicePtr
	busy   int // the stream slot whose work on it has not been synchronized, or -1
	busyAt uint64
}

// freed is memory the user freed whose streams may not have passed it: it may still count
// against a quota while Hold keeps the streams from passing.
type freed struct {
	n     int
	marks [2]mark // the free's stream at the free, and the stream of the object's last work
}

// Rig is the fake driver and the device the checker runs on.
type Rig struct {
	F   *fakecuda.Driver
	Dev *icuda.Device
}

// world is the system under test and its model.
type world struct {
	cfg  Config
	rig  Rig
	pub  *pubcuda.Device
	heap *device.Heap
	pool *pinned.Pool
	tier *uvm.Tier
	// tierPool is the tier's host pool when the configuration gives it one (TierHostQuota).
	tierPool *pinned.Pool
	mv       *copyengine.Batcher

	streams []pubcuda.Stream
	weights weights // the generator's, by the configuration's profiles

	dev   map[int]*dblock
	bufs  map[int]*pbuf
	tb    map[int]*ublock
	devID []int // sorted IDs, for a deterministic generator
	bufID []int
	tbID  []int

	hold              bool
	poolFreed         []freed
	devFreed          []freed
	closed            bool
	counts            map[string]int // legitimate refusals seen, by kind
	checkedBytes      int64
	tierBytes         int   // bytes of live tier blocks
	tierPinned        int   // bytes of acquired tier blocks
	crossFrees        []int // by stream slot: its blocks freed on other streams since the heap last drained its frees
	devLive, poolLive int
	// scratch receives the device blocks check reads back (synchronously), grown to the
	// largest: one buffer instead of one per block per synchronize.
	scratch []byte
	// side draws the hand-overs the generator puts in place of some operations (genReuseFree),
	// apart from the generator's own draws: a seed draws the same sequence around them.
	side *rand.Rand

	// What each stream slot has run (order.go).
	clock      uint64
	last, ran  []uint64 // by slot: the mark of the last work queued; the work known to have run
	legacyWork []uint64 // the marks of the legacy stream's work, in order
}

func newWorld(cfg Config, rig Rig) (*world, error) {
	w := &world{cfg: cfg, rig: rig, pub: icuda.Wrap[*pubcuda.Device](rig.Dev), weights: weightsFor(cfg),
		dev: map[int]*dblock{}, bufs: map[int]*pbuf{}, tb: map[int]*ublock{}, counts: map[string]int{},
	}
	slots := cfg.Streams
	if cfg.Legacy {
		slots++
	}
	w.crossFrees, w.last, w.ran = make([]int, slots), make([]uint64, slots), make([]uint64, slots)
	w.side = newRand(cfg.Seed, 6)
	rig.F.ClearStickyError() // a fault of an earlier run would fail every call of this one
	var err error
	w.heap, err = device.New(w.pub, device.Options{Capacity: int(cfg.DeviceCapacity), ZeroOnFree: cfg.DeviceZero, Quota: int(cfg.DeviceQuota), PurgeDelay: cfg.PurgeDelay})
	if err != nil {
		return nil, fmt.Errorf("device.New: %w", err)
	}
	w.pool, err = pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: poolCapacity, ZeroOnFree: cfg.PoolZero, Quota: int(cfg.PoolQuota), Shards: cfg.PoolShards, PurgeDelay: cfg.PurgeDelay})
	if err != nil {
		_ = w.heap.Close()
		return nil, fmt.Errorf("pinned.New: %w", err)
	}
	if w.mv, err = copyengine.New(w.pub, copyengine.Options{Method: cfg.Mover}); err != nil {
		_ = w.pool.Close()
		_ = w.heap.Close()
		return nil, fmt.Errorf("copyengine.New: %w", err)
	}
	if cfg.TierHostQuota > 0 {
		w.tierPool, err = pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: poolCapacity, ZeroOnFree: cfg.PoolZero, Quota: int(cfg.TierHostQuota), Shards: cfg.PoolShards, PurgeDelay: cfg.PurgeDelay})
		if err != nil {
			_ = w.mv.Close()
			_ = w.pool.Close()
			_ = w.heap.Close()
			return nil, fmt.Errorf("pinned.New of the tier's pool: %w", err)
		}
	}
	w.tier, err = uvm.New(w.pub, uvm.Options{DeviceBudget: int(cfg.TierBudget), Heap: w.heap, HostPool: w.tierPool, ThrashLapse: -1, Mover: w.mv})
	if err != nil {
		_ = w.mv.Close()
		if w.tierPool != nil {
			_ = w.tierPool.Close()
		}
		_ = w.pool.Close()
		_ = w.heap.Close()
		return nil, fmt.Errorf("uvm.New: %w", err)
	}
	for k := range cfg.Streams {
		s, err := rig.Dev.StreamCreate(!w.blocking(k))
		if err != nil {
			w.abandon()
			return nil, fmt.Errorf("StreamCreate: %w", err)
		}
		w.streams = append(w.streams, pubcuda.Stream(s))
	}
	if cfg.Legacy {
		w.streams = append(w.streams, legacyStream)
	}
	return w, nil
}

// legacyStream is the legacy default stream's handle, which every front accepts (pinned refuses
// only the per-thread default stream, 2). It is never destroyed.
const legacyStream pubcuda.Stream = 0

// streamForgetter is a pool's ForgetStream (issue 25 adds it): called before a stream is
// destroyed where the pool has it.
type streamForgetter interface {
	ForgetStream(s pubcuda.Stream) error
}

// abandon releases what it can after a failed run, ignoring errors, so that the next replay
// starts on a clean driver as far as possible.
func (w *world) abandon() {
	if w.closed {
		return
	}
	w.closed = true
	w.rig.F.Hold(false)
	w.rig.F.Complete()
	w.rig.F.ClearStickyError()
	if w.tier != nil {
		for _, id := range w.tbID {
			u := w.tb[id]
			for ; u.pins > 0; u.pins-- {
				_ = w.tier.Release(u.h, w.streams[u.acq])
			}
			_ = w.tier.Free(u.h)
		}
		_ = w.tier.Close()
	}
	if w.tierPool != nil {
		_ = w.tierPool.Close()
	}
	if w.mv != nil {
		_ = w.mv.Close()
	}
	if w.heap != nil {
		for _, id := range w.devID {
			_ = w.heap.Free(w.dev[id].p)
		}
		_ = w.heap.Sync()
	}
	if w.pool != nil {
		for _, id := range w.bufID {
			_ = w.pool.Free(w.bufs[id].b)
		}
	}
	for _, s := range w.streams {
		_ = w.rig.Dev.StreamSynchronize(uintptr(s))
		if w.heap != nil {
			_ = w.heap.ForgetStream(s)
		}
		if f, ok := any(w.pool).(streamForgetter); ok && w.pool != nil {
			_ = f.ForgetStream(s)
		}
	}
	if w.heap != nil {
		_ = w.heap.Close()
	}
	if w.pool != nil {
		_ = w.pool.Close()
	}
	for _, s := range w.streams {
		if s != legacyStream {
			_ = w.rig.Dev.StreamDestroy(uintptr(s))
		}
	}
}

// Failure is what a run found wrong.
type Failure struct {
	Step int    // index in the sequence of the failing operation (len: the final checks)
	Op   Op     // the failing operation (Kind numKinds: the final checks)
	What string // the class of failure, compared when shrinking
	Msg  string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("step %d (%s): %s: %s", f.Step, f.Op, f.What, f.Msg)
}

func failf(what, format string, args ...any) *Failure {
	return &Failure{What: what, Msg: fmt.Sprintf(format, args...)}
}

// unexpected is a failure for an error a legitimate operation returned. A fault of queued work
// (CUDA_ERROR_ILLEGAL_ADDRESS: memory freed or unmapped under it) is sticky: whichever call
// reports it, it is one class of failure.
func unexpected(call string, err error) *Failure {
	if code, ok := pubcuda.ResultCode(err); ok && code == illegalAddress {
		return &Failure{What: "device fault: queued work met memory freed or unmapped under it", Msg: call + ": " + err.Error()}
	}
	return &Failure{What: "error from " + call, Msg: err.Error()}
}

// illegalAddress is CUDA_ERROR_ILLEGAL_ADDRESS.
const illegalAddress = 700

// wantErr is nil when err matches target, and a failure otherwise.
func wantErr(call string, err, target error) *Failure {
	if errors.Is(err, target) {
		return nil
	}
	return &Failure{What: "misuse of " + call + " not refused with " + target.Error(), Msg: fmt.Sprint(err)}
}

func insertID(ids []int, id int) []int {
	i := sort.SearchInts(ids, id)
	ids = append(ids, 0)
	copy(ids[i+1:], ids[i:])
	ids[i] = id
	return ids
}

func removeID(ids []int, id int) []int {
	i := sort.SearchInts(ids, id)
	if i < len(ids) && ids[i] == id {
		return append(ids[:i], ids[i+1:]...)
	}
	return ids
}
