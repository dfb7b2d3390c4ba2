//go:build cgo && linux

package main

// The anchors of the cuda suite (issue 26): what a Go program would use for reusable pinned
// memory instead of pinmalloc, measured in the same cases: CUDA's own stream-ordered memory
// pool in host memory (cuda-hostpool) and a PyTorch-style caching host allocator over
// cuMemHostAlloc (torch-caching-host, torchhost.go).

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// hostPoolPrime is the allocation that primes a host pool before it is measured (rapidsmpf#851:
// the first allocation of an unprimed pool is several times slower); the pool keeps it, its
// release threshold being UINT64_MAX.
const hostPoolPrime = 32 << 20

// The host pools measured: at the device's HOST_NUMA node (CUDA 12.6), and at the HOST location
// (CUDA 13.0), where the driver makes each.
var hostPoolLocations = []struct {
	name string
	loc  int32
}{{hostPoolName, cuda.LocationHostNUMA}, {hostPoolHostName, cuda.LocationHost}}

// cudaHostPool allocates from a CUDA memory pool in host memory, as a user would set one up:
// cuMemPoolCreate at a host location (the device's HOST_NUMA node, or HOST), the release
// threshold at UINT64_MAX (its default of 0 empties the pool at every synchronize: rmm#2379),
// device access granted with cuMemPoolSetAccess, primed with one allocation. An allocation is
// cuMemAllocFromPoolAsync on the suite's stream; with cpuFill, a synchronize of that stream
// follows, which a program must wait for before the CPU writes the buffer (a pinmalloc buffer
// it may write at once); without, the buffer is the stream's alone, as a stream-ordered user
// runs it, and the pair's loop synchronizes once at its end. A free is cuMemFreeAsync on the
// stream.
type cudaHostPool struct {
	dev     *cuda.Device
	s       cuda.Stream
	pool    cuda.MemPool
	cpuFill bool
}

// hostPoolSupport says why the driver cannot make pools at host location loc, or "" when it
// can: by the device attribute that says so (cuda.Device.HostPoolSupport), not by the driver's
// version.
func hostPoolSupport(dev *cuda.Device, loc int32) string {
	ok, how, err := dev.HostPoolSupport(loc)
	switch {
	case err != nil:
		return "" // the driver failed otherwise: the pool's creation says how
	case !ok:
		where := "HOST_NUMA"
		if loc == cuda.LocationHost {
			where = "HOST"
		}
		return fmt.Sprintf("%s at the %s location (%s)", noHostPools, where, how)
	}
	return ""
}

// openHostPool creates, sets up and primes a pool at host location loc on dev.
func openHostPool(dev *cuda.Device, s cuda.Stream, loc int32, prime uintptr, cpuFill bool) (*cudaHostPool, error) {
	if why := hostPoolSupport(dev, loc); why != "" {
		return nil, errors.New(why)
	}
	id := int32(0)
	if loc == cuda.LocationHostNUMA {
		if node, ok := dev.HostNUMAID(); ok {
			id = int32(node)
		}
	}
	p, err := dev.MemPoolCreate(cuda.MemPoolProps{Location: cuda.MemLocation{Type: loc, ID: id}})
	if err != nil {
		// The driver says it makes such pools: a refusal is a failure to report, not a row to
		// mark N/A.
		return nil, fmt.Errorf("cuMemPoolCreate(host location %d, id %d) on a driver that makes them: %w", loc, id, err)
	}
	a := &cudaHostPool{dev: dev, s: s, pool: p, cpuFill: true}
	err = dev.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, math.MaxUint64)
	if err == nil {
		err = dev.MemPoolSetAccess(p, []cuda.MemLocation{{Type: cuda.LocationDevice, ID: int32(dev.Ordinal())}}, false)
	}
	if err == nil && prime > 0 {
		var b []byte
		if b, err = a.alloc(int(prime)); err == nil {
			err = errors.Join(a.free(b), dev.StreamSynchronize(s))
		}
	}
	if err != nil {
		return nil, errors.Join(err, dev.MemPoolDestroy(p))
	}
	a.cpuFill = cpuFill
	return a, nil
}

func (a *cudaHostPool) alloc(n int) ([]byte, error) {
	p, err := a.dev.MemAllocFromPoolAsync(uintptr(n), a.pool, a.s)
	if err != nil {
		return nil, err
	}
	if a.cpuFill {
		if err := a.dev.StreamSynchronize(a.s); err != nil {
			return nil, errors.Join(err, a.dev.MemFreeAsync(p, a.s))
		}
	}
	return unsafe.Slice(bytePtr(uintptr(p)), n), nil
}

func (a *cudaHostPool) free(b []byte) error {
	return a.dev.MemFreeAsync(cuda.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), a.s)
}

// touch writes the buffer's first byte where the CPU may: after the allocation's synchronize.
func (a *cudaHostPool) touch(b []byte) {
	if a.cpuFill {
		b[0] = 1
	}
}

func (a *cudaHostPool) close() error {
	return errors.Join(a.dev.StreamSynchronize(a.s), a.dev.MemPoolDestroy(a.pool))
}

// footprint is the pool's reserved bytes (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).
func (a *cudaHostPool) footprint() (held, resident uint64) {
	v, _ := a.dev.MemPoolGetAttribute(a.pool, cuda.PoolAttrReservedMemCurrent)
	return v, v
}

// hostAllocBacking is cuMemHostAlloc: the backing of PyTorch's CachingHostAllocator.
type hostAllocBacking struct{ dev *cuda.Device }

func (b hostAllocBacking) get(n int) (uintptr, error) { return b.dev.MemHostAlloc(uintptr(n), 0) }
func (b hostAllocBacking) put(p uintptr, _ int) error { return b.dev.MemFreeHost(p) }

// deviceEvents are events of the device for the cache's recorded streams (timing disabled, as
// PyTorch's).
type deviceEvents struct{ dev *cuda.Device }

func (e deviceEvents) create() (uintptr, error) {
	ev, err := e.dev.EventCreate(false)
	return uintptr(ev), err
}

func (e deviceEvents) record(ev, s uintptr) error {
	return e.dev.EventRecord(cuda.Event(ev), cuda.Stream(s))
}

func (e deviceEvents) done(ev uintptr) (bool, error) {
	err := e.dev.EventQuery(cuda.Event(ev))
	if errors.Is(err, pinmalloc.ErrNotReady) {
		return false, nil
	}
	return err == nil, err
}

func (e deviceEvents) wait(ev uintptr) error    { return e.dev.EventSynchronize(cuda.Event(ev)) }
func (e deviceEvents) destroy(ev uintptr) error { return e.dev.EventDestroy(cuda.Event(ev)) }

// anchorSources are the host sources of the anchors: CUDA's host pools (HOST_NUMA, HOST), whose
// buffers the CPU fills (an allocation waits for its stream), and the PyTorch-style cache over
// cuMemHostAlloc.
func (c *cudaSuite) anchorSources() (pools []hostSource, torch hostSource) {
	for _, hp := range hostPoolLocations {
		pools = append(pools, hostSource{hp.name, func(int64) (allocator[[]byte], error) { return openHostPool(c.dev, c.s, hp.loc, hostPoolPrime, true) }})
	}
	return pools, hostSource{torchName, func(int64) (allocator[[]byte], error) {
		return newTorchHost(hostAllocBacking{c.dev}, deviceEvents{c.dev}), nil
	}}
}

// pairPools are the host pools as the pair cases run them: stream-ordered, the CPU never
// touching a buffer, one synchronize at the end of each timed loop (synced).
func (c *cudaSuite) pairPools() []impl {
	var ims []impl
	for _, hp := range hostPoolLocations {
		ims = append(ims, c.synced(goImpl(hp.name, func(int64) (allocator[[]byte], error) {
			return openHostPool(c.dev, c.s, hp.loc, hostPoolPrime, false)
		})))
	}
	return ims
}

// setupSize is the memory the set-up case makes ready: 1 GiB on a GPU, 64 MiB on the fake
// (whose figures are not GPU figures, and whose host is a small shared machine).
func (c *cudaSuite) setupSize() int64 {
	if c.fake {
		return 64 << 20
	}
	return 1 << 30
}

// setupCase times making size bytes of pinned memory ready for buffers: pinmalloc's CUDAHost
// pool with Options.Precommit of size (New to WaitPrecommit) against a CUDA host pool set up as
// cudaHostPool does and primed with one allocation of size (cuMemPoolCreate to the synchronize
// after its free). The median of three rounds, each timing every one once from nothing (the
// pool or the pinned pool closed in between), in a turning order (setupRounds).
func (c *cudaSuite) setupCase(size int64) benchCase {
	name := "cuda-setup/" + sizeName(size)
	return benchCase{name: name, group: "gpu", size: size, custom: func(s *suite) []result {
		var es []setupEntrant
		for _, im := range []setupEntrant{
			{"pinmalloc-pool", func() (time.Duration, error) {
				t0 := time.Now()
				p, err := pinned.New(pinned.Options{Capacity: int(2 * size), Backend: pinned.CUDAHost, Precommit: int(size)})
				if err != nil {
					return 0, err
				}
				err = p.WaitPrecommit()
				d := time.Since(t0)
				return d, errors.Join(err, p.Close())
			}},
			{hostPoolName, c.hostPoolSetup(cuda.LocationHostNUMA, size)},
			{hostPoolHostName, c.hostPoolSetup(cuda.LocationHost, size)},
		} {
			if s.cfg.implFilter.MatchString(im.name) {
				es = append(es, im)
			}
		}
		return setupRounds(name, es, 3)
	}}
}

// setupEntrant is one allocator of the set-up case: a set-up from nothing, timed.
type setupEntrant struct {
	name string
	once func() (time.Duration, error)
}

// setupRounds times every entrant's set-up in rounds rounds, each running every entrant once in
// an order that turns by one each round (as interleave does), and records the median of each
// one's rounds as setup_ms, and their spread (round_spread, noise.go); an entrant that fails
// records its error and leaves the rounds.
func setupRounds(name string, es []setupEntrant, rounds int) []result {
	ds := make([][]float64, len(es))
	errs := make([]error, len(es))
	for round := range rounds {
		for k := range es {
			i := (k + round) % len(es)
			if errs[i] != nil {
				continue
			}
			d, err := es[i].once()
			if err != nil {
				errs[i] = err
				continue
			}
			ds[i] = append(ds[i], float64(d.Microseconds())/1000)
		}
	}
	var out []result
	for i, e := range es {
		rs := resultSet{c: name, impl: e.name}
		if errs[i] != nil {
			rs.fail(errs[i])
		} else if len(ds[i]) > 0 {
			if s := roundSpread(ds[i]); s > 0 {
				rs.add("round_spread", s, "ratio")
			}
			rs.add("setup_ms", median(ds[i]), "ms")
		}
		out = append(out, rs.out...)
	}
	return out
}

// hostPoolSetup times the set-up of a pool at host location loc primed with size bytes.
func (c *cudaSuite) hostPoolSetup(loc int32, size int64) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		t0 := time.Now()
		a, err := openHostPool(c.dev, c.s, loc, uintptr(size), true)
		if err != nil {
			return 0, err
		}
		d := time.Since(t0)
		return d, a.close()
	}
}

// traceCase replays the serving trace (cases.go) on pinmalloc's CUDAHost pool, the CUDA host
// pool and the PyTorch-style cache, each sampling what it holds: committed bytes, the pool's
// reserved bytes, the cache's blocks.
func (c *cudaSuite) traceCase(srcs []hostSource) benchCase {
	const name = "cuda-trace"
	return benchCase{name: name, group: "gpu", custom: func(s *suite) []result { return traceSources(s, name, srcs) }}
}

// stager is a host source whose buffer can be freed while a copy queued on a stream still
// reads it, the way each allocator offers: pinmalloc's FreeAsync, the PyTorch-style cache's
// recordStream and free, the host pool's cuMemFreeAsync.
type stager interface {
	allocator[[]byte]
	freeAfter(b []byte, s cuda.Stream) error
}

func (a pinPool) freeAfter(b []byte, s cuda.Stream) error { return a.p.FreeAsync(b, pcuda.Stream(s)) }

func (a *torchHost) freeAfter(b []byte, s cuda.Stream) error {
	return errors.Join(a.recordStream(b, s), a.free(b))
}

func (a *cudaHostPool) freeAfter(b []byte, s cuda.Stream) error {
	if s != a.s {
		return errors.New("cuda-hostpool: staging on a stream other than the pool's")
	}
	return a.free(b)
}

// stagingSizes are the buffer sizes of the staging loop.
var stagingSizes = []int64{64 << 10, 1 << 20}

// stagingCase is the staging loop users run: take a pinned buffer, fill its first byte, queue
// its copy to the device on the suite's stream, free it while the copy may still read it; n
// times, then one synchronize. The time per iteration covers the allocator's calls, the queued
// copy and the events each allocator records; the cache's reserved bytes after it are shown
// where the source can say.
func (c *cudaSuite) stagingCase(size int64, srcs []hostSource) benchCase {
	name := "cuda-staging/" + sizeName(size)
	return benchCase{name: name, group: "gpu", size: size, custom: func(s *suite) []result {
		var out []result
		for _, src := range srcs {
			if !s.cfg.implFilter.MatchString(src.name) {
				continue
			}
			rs := resultSet{c: name, impl: src.name}
			held, err := c.staging(cudaConfig(s.cfg), int(size), src, &rs)
			if err != nil {
				rs.fail(err)
			} else if held > 0 {
				rs.add("held_bytes", float64(held), "B")
			}
			out = append(out, rs.out...)
		}
		return out
	}}
}

// staging runs the staging loop on one source and records ns per iteration into rs.
func (c *cudaSuite) staging(cfg *config, size int, src hostSource, rs *resultSet) (held uint64, err error) {
	a, err := src.open(caseCapacity)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, a.close()) }()
	st, ok := a.(stager)
	if !ok {
		return 0, fmt.Errorf("%s cannot free a buffer a stream still uses", src.name)
	}
	d, err := c.dev.MemAlloc(uintptr(size))
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, c.dev.MemFree(d)) }()
	run := func(n int) (time.Duration, error) {
		t0 := time.Now()
		for range n {
			b, err := st.alloc(size)
			if err != nil {
				return 0, err
			}
			st.touch(b)
			if err := c.dev.MemcpyHtoDAsync(d, uintptr(unsafe.Pointer(&b[0])), uintptr(size), c.s); err != nil {
				return 0, err
			}
			if err := st.freeAfter(b, c.s); err != nil {
				return 0, err
			}
		}
		err := c.dev.StreamSynchronize(c.s)
		return time.Since(t0), err
	}
	if _, err := run(1); err != nil {
		return 0, err
	}
	m, err := measure(cfg, run, 1)
	if err != nil {
		return 0, err
	}
	rs.add("ns_per_iter", m.nsPerOp, "ns")
	if fp, ok := a.(footprinter); ok {
		held, _ = fp.footprint()
	}
	return held, nil
}
