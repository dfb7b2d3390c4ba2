//go:build cgo && linux

package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The footprint suite alone (-footprint, issue 38): the footprint cases with a CUDAHost pool
// beside the locked one, the serving trace paced (the trace case's) and replayed from
// traces/serving.pmtrace without its pauses, and a device heap at low occupancy beside
// cuMemAllocAsync pools, on device 0 of the CUDA driver or, where none loads, on the fake
// driver in a re-executed process. The fake's VMM granule is the driver's (2 MiB, measured on
// the H100), so the CUDAHost pool's committed bytes are what a GPU would show; the fake's
// device memory pools reserve 32 MiB chunks and carve allocations of 512 B steps from them, as
// CuPy observed of the driver (cupy/cupy#5177), so their reserved bytes are whole chunks
// (TestCUDAPoolRules checks the model on a GPU; the GPU figure waits for a GPU run).

// footprintOnly is the -footprint mode: its cases, and the CUDAHost pool as one more
// allocator.
func footprintOnly(cfg *config) ([]benchCase, impl, func()) {
	if code, rerun := driverOrFake("bench: -footprint", "its CUDA host memory commits 2 MiB granules as the driver's", cfg.fake); rerun {
		os.Exit(code)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -footprint:", err)
		os.Exit(1)
	}
	fake := fakecuda.IsFake(dev)
	if cfg.name == "" || strings.HasPrefix(cfg.name, "cpu-") {
		cfg.name = map[bool]string{false: "footprint-gpu", true: "footprint-fake"}[fake]
		if cfg.quick {
			cfg.name += "-quick"
		}
	}
	openCUDAHost := func(capacity int64) (allocator[[]byte], error) {
		p, err := pinned.New(pinned.Options{Capacity: int(capacity), Backend: pinned.CUDAHost})
		if err != nil {
			return nil, err
		}
		return pinPool{p}, nil
	}
	host := goImpl(cudaHostName, openCUDAHost)
	cs := footprintCases()
	sources := []hostSource{
		{"pinmalloc-pool", openPool},
		{cudaHostName, openCUDAHost},
		{torchName, func(int64) (allocator[[]byte], error) { return newTorchHost(lockedOrPageable(), nil), nil }},
	}
	cs = append(cs,
		benchCase{name: "footprint/trace", group: "footprint", custom: func(s *suite) []result { return traceSources(s, "footprint/trace", sources) }},
		benchCase{name: "footprint/trace-16p", group: "footprint", custom: func(s *suite) []result { return traceOn16Ps(s, sources[1]) }},
		benchCase{name: "footprint/replay", group: "footprint", custom: func(s *suite) []result { return footprintReplay(s, sources[:2]) }},
		benchCase{name: "footprint/device", group: "footprint", custom: func(s *suite) []result { return footprintDevice(s, dev) }},
		benchCase{name: "footprint/device-latency", group: "footprint", custom: func(s *suite) []result { return footprintDeviceLatency(s, dev) }},
	)
	return cs, host, func() {
		if err := dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -footprint: close:", err)
		}
	}
}

// lockedOrPageable is the cache's backing: locked memory, or pageable where the memlock limit
// is too low for the suite (memlock.go).
func lockedOrPageable() hostBacking {
	if hostMemory.pageable {
		return pageableBacking{}
	}
	return lockedBacking{}
}

// pageableBacking is mmap without mlock.
type pageableBacking struct{}

func (pageableBacking) get(n int) (uintptr, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return 0, fmt.Errorf("torch-caching-host: mmap of %d bytes: %w", n, err)
	}
	return uintptr(unsafe.Pointer(&b[0])), nil
}
func (pageableBacking) put(p uintptr, n int) error { return lockedBacking{}.put(p, n) }

// traceSources plays the serving trace (the trace case's, paced) on each source, as case c.
func traceSources(s *suite, c string, sources []hostSource) []result {
	var out []result
	for _, src := range sources {
		if !s.cfg.implFilter.MatchString(src.name) {
			continue
		}
		rs := resultSet{c: c, impl: src.name}
		a, err := src.open(traceCapacity)
		if err == nil {
			var tr *traceResult
			tr, err = traceLoop(a, s.trace)
			err = errors.Join(err, a.close())
			if err == nil {
				rs.traced(tr)
			}
		}
		if err != nil {
			rs.fail(err)
		}
		out = append(out, rs.out...)
	}
	return out
}

// traceOn16Ps is the serving trace, paced, on src with GOMAXPROCS at a GPU host's: the trace's
// goroutine wakes on any of 16 Ps, and a pool with a shard per P spreads over 16 shards where
// this machine may have two. The GPU check's H200 run held 2.600 there where the fake on two
// Ps showed 1.79 (TestTraceOn16Ps).
func traceOn16Ps(s *suite, src hostSource) []result {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(gpuHostPs))
	return traceSources(s, "footprint/trace-16p", []hostSource{src})
}

// footprintReplay replays traces/serving.pmtrace, without its pauses, on each source.
func footprintReplay(s *suite, sources []hostSource) []result {
	var out []result
	f, err := os.Open("traces/serving.pmtrace")
	var evs []alloctrace.Event
	if err == nil {
		evs, err = alloctrace.Read(f)
		f.Close()
	}
	for _, src := range sources {
		if !s.cfg.implFilter.MatchString(src.name) {
			continue
		}
		rs := resultSet{c: "footprint/replay", impl: src.name}
		var r *replayResult
		if err == nil {
			var a allocator[[]byte]
			if a, err = src.open(replayCapacity(evs)); err == nil {
				r, err = replayLoop(a, evs)
				err = errors.Join(err, a.close())
			}
		}
		if err != nil {
			rs.fail(err)
		} else {
			rs.add("peak_live_bytes", float64(r.PeakLive), "B")
			rs.add("peak_bytes", float64(r.PeakHeld), "B")
			rs.add("committed_over_live", float64(r.PeakHeld)/float64(r.PeakLive), "ratio")
		}
		out = append(out, rs.out...)
	}
	return out
}

// footprintDevice is the low-occupancy larson on device memory, one stream: a burst of 512
// blocks of 8 B to 64 KiB freed but 64, which then churn, one replaced at random each step,
// then idle (larsonDevice). The device heap (its
// default provider: VMM granules of 2 MiB where the device has the VMM API) reports its
// committed memory at the end, after footprintIdle and after Trim; cuMemAllocAsync pools, with
// the release threshold at 0 (the default: the pool gives back at each synchronize what it
// holds free) and at UINT64_MAX (what users set, so that a synchronize costs no allocation
// later), report their reserved memory after a synchronize, after footprintIdle, and after
// cuMemPoolTrimTo(0).
func footprintDevice(s *suite, dev *cuda.Device) []result {
	steps := 100_000
	if s.cfg.quick {
		steps = 20_000
	}
	st, err := dev.StreamCreate(true)
	if err != nil {
		return []result{{Case: "footprint/device", Impl: "pinmalloc-device", Metric: "error", Note: err.Error()}}
	}
	defer func() { _ = dev.StreamDestroy(st) }()
	var out []result
	measure := func(name string, f func() (larsonResult, error)) {
		if !s.cfg.implFilter.MatchString(name) {
			return
		}
		rs := resultSet{c: "footprint/device", impl: name}
		if r, err := f(); err != nil {
			rs.fail(err)
		} else {
			rs.larsoned(r)
		}
		out = append(out, rs.out...)
	}
	measure("pinmalloc-device", func() (r larsonResult, err error) {
		h, err := device.New(cuda.Wrap[*pcuda.Device](dev), device.Options{Capacity: 1 << 30})
		if err != nil {
			return r, err
		}
		defer func() { err = errors.Join(err, h.Close()) }()
		free := func(p cuda.DevicePtr) error { return h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(st)) }
		ps, err := larsonDevice(steps, &r, func(n int) (cuda.DevicePtr, error) {
			p, err := h.Alloc(n, pcuda.Stream(st))
			return cuda.DevicePtr(p), err
		}, free, func() error { return dev.StreamSynchronize(st) })
		defer func() {
			for _, p := range ps {
				err = errors.Join(err, free(p))
			}
			err = errors.Join(err, h.Sync())
		}()
		if err != nil {
			return r, err
		}
		r.end = h.Usage().Committed
		time.Sleep(footprintIdle)
		r.idle = h.Usage().Committed
		err = h.Trim()
		r.trimmed = h.Usage().Committed
		return r, err
	})
	for _, pool := range []struct {
		name      string
		threshold uint64
	}{{"cuda-mallocasync-t0", 0}, {"cuda-mallocasync-tmax", math.MaxUint64}} {
		measure(pool.name, func() (r larsonResult, err error) {
			p, err := dev.MemPoolCreate(cuda.MemPoolProps{Location: cuda.MemLocation{Type: cuda.LocationDevice, ID: int32(dev.Ordinal())}})
			if err != nil {
				return r, err
			}
			defer func() { err = errors.Join(err, dev.MemPoolDestroy(p)) }()
			if err := dev.MemPoolSetAttribute(p, cuda.PoolAttrReleaseThreshold, pool.threshold); err != nil {
				return r, err
			}
			free := func(q cuda.DevicePtr) error { return dev.MemFreeAsync(q, st) }
			ps, err := larsonDevice(steps, &r, func(n int) (cuda.DevicePtr, error) {
				return dev.MemAllocFromPoolAsync(uintptr(n), p, st)
			}, free, func() error { return dev.StreamSynchronize(st) })
			defer func() {
				for _, q := range ps {
					err = errors.Join(err, free(q))
				}
				err = errors.Join(err, dev.StreamSynchronize(st))
			}()
			if err != nil {
				return r, err
			}
			reserved := func() uint64 {
				v, e := dev.MemPoolGetAttribute(p, cuda.PoolAttrReservedMemCurrent)
				err = errors.Join(err, e)
				return v
			}
			err = dev.StreamSynchronize(st)
			r.end = reserved()
			time.Sleep(footprintIdle)
			r.idle = reserved()
			err = errors.Join(err, dev.MemPoolTrimTo(p, 0))
			r.trimmed = reserved()
			return r, err
		})
	}
	return out
}

// larsonDevice runs footprintDevice's churn with alloc and free, synchronizing the stream
// every syncEvery steps (as a program does, and so that the fake driver, whose streams run
// their work only when synchronized or queried, hands freed memory back), and returns the
// blocks live at the end (those allocated, on an error), with the bytes live and the time per
// step of the churn (a free and an allocation) in r.
func larsonDevice(steps int, r *larsonResult, alloc func(n int) (cuda.DevicePtr, error), free func(cuda.DevicePtr) error, sync func() error) ([]cuda.DevicePtr, error) {
	const slots = 64
	ps := make([]cuda.DevicePtr, 0, slots)
	ns := make([]int, slots)
	burst := make([]cuda.DevicePtr, 0, (deviceBurst-1)*slots)
	for i := range slots {
		ns[i] = larsonSize(larsonDraw(0, uint64(i)), 8, 64<<10)
		p, err := alloc(ns[i])
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
		for j := range deviceBurst - 1 { // the burst's other blocks, between the slots'
			q, err := alloc(larsonSize(larsonDraw(1, uint64(i*deviceBurst+j)), 8, 64<<10))
			if err != nil {
				return append(ps, burst...), err
			}
			burst = append(burst, q)
		}
	}
	for k, q := range burst {
		if err := free(q); err != nil {
			return append(ps, burst[k:]...), err
		}
	}
	start := time.Now()
	for k := range steps {
		if k%syncEvery == syncEvery-1 {
			if err := sync(); err != nil {
				return ps, err
			}
		}
		z := larsonDraw(0, uint64(slots+k))
		i := int((z >> 32) * slots >> 32)
		if err := free(ps[i]); err != nil {
			ps[i] = ps[len(ps)-1]
			return ps[:len(ps)-1], err
		}
		ns[i] = larsonSize(z, 8, 64<<10)
		p, err := alloc(ns[i])
		if err != nil {
			ps[i] = ps[len(ps)-1]
			return ps[:len(ps)-1], err
		}
		ps[i] = p
	}
	r.nsPerOp = float64(time.Since(start).Nanoseconds()) / float64(steps)
	for _, n := range ns {
		r.live += uint64(n)
	}
	return ps, nil
}

// syncEvery is how many steps of the device churn pass between two synchronizes.
const syncEvery = 256

// deviceBurst is the device churn's peak over its live blocks: it starts with deviceBurst
// blocks for each of its slots, all freed but the slots', as a program that peaked and now
// runs at low occupancy.
const deviceBurst = 8

// printFootprintCUDA writes the -footprint suite's trace table, when it ran.
func printFootprintCUDA(w io.Writer, rs []result) {
	if !ran(rs, "footprint/trace") && !ran(rs, "footprint/replay") {
		return
	}
	fmt.Fprintf(w, "\n### Serving trace: peak committed / peak live\n\n| allocator | paced (trace case) | replayed without pauses |\n|---|---|---|\n")
	for _, im := range []string{"pinmalloc-pool", cudaHostName, torchName} {
		cell := func(c string) string {
			if e, failed := failure(rs, c, im); failed {
				return "error: " + e
			}
			if v, ok := lookup(rs, c, im, "committed_over_live"); ok {
				return fmt.Sprintf("%.3f", v)
			}
			return ""
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", im, cell("footprint/trace"), cell("footprint/replay"))
	}
}
