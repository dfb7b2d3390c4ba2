//go:build cgo && linux

package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pinmalloc/pinmalloc/copyengine"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// batchSuite measures copyengine.Batcher, the copy engine of the uvm tier, on device 0: 16 MiB
// batches of scattered blocks of 4 KiB, 64 KiB and 1 MiB between device memory and pinned host
// memory mapped for the device, each way, moved by the gather kernel (pinmalloc-kernel), by one
// cuMemcpyBatchAsync call (cuda-batch-api) and by one cuMemcpyAsync per block (cuda-per-copy),
// in GB/s, with the CPU time per block queued.
type batchSuite struct {
	dev  *cuda.Device
	s    cuda.Stream
	host uintptr        // 2 × batchBytes of pinned host memory, mapped for the device
	d    cuda.DevicePtr // 2 × batchBytes of device memory
	fake bool           // dev is the fake driver's: the targets are N/A
}

func init() { gpuSuites = append(gpuSuites, &batchSuite{}) }

// batchBytes is the bytes of one batch; blocks sit in slots twice their size, in a random
// order on the device side.
const batchBytes = 16 << 20

var (
	batchSizes   = []int64{4 << 10, 64 << 10, 1 << 20}
	batchDirs    = []string{"h2d", "d2h"}
	batchMethods = []struct {
		name string
		m    copyengine.Method
	}{{"pinmalloc-kernel", copyengine.MethodKernel}, {"cuda-batch-api", copyengine.MethodBatchAPI}, {"cuda-per-copy", copyengine.MethodPerCopy}}
)

func (*batchSuite) name() string { return "batch" }

func (c *batchSuite) open() (err error) {
	if c.dev, err = cuda.Open(0); err != nil {
		return err
	}
	c.fake = fakecuda.IsFake(c.dev)
	if c.s, err = c.dev.StreamCreate(true); err == nil {
		if c.host, err = c.dev.MemHostAlloc(2*batchBytes, cuda.HostAllocDeviceMap|cuda.HostAllocPortable); err == nil {
			if c.d, err = c.dev.MemAlloc(2 * batchBytes); err != nil {
				err = errors.Join(err, c.dev.MemFreeHost(c.host))
			}
		}
		if err != nil {
			err = errors.Join(err, c.dev.StreamDestroy(c.s))
		}
	}
	if err != nil {
		return errors.Join(err, c.dev.Close())
	}
	return nil
}

func (c *batchSuite) close() error {
	return errors.Join(c.dev.MemFree(c.d), c.dev.MemFreeHost(c.host), c.dev.StreamDestroy(c.s), c.dev.Close())
}

func (*batchSuite) impls() []impl { return nil }

func (c *batchSuite) cases() []benchCase {
	var cs []benchCase
	for _, dir := range batchDirs {
		for _, sz := range batchSizes {
			name := "batch-" + dir + "/" + sizeName(sz)
			cs = append(cs, benchCase{name: name, group: "gpu", size: sz, custom: func(s *suite) []result {
				var sets []*resultSet
				var methods []copyengine.Method
				for _, m := range batchMethods {
					if s.cfg.implFilter.MatchString(m.name) {
						sets = append(sets, &resultSet{c: name, impl: m.name})
						methods = append(methods, m.m)
					}
				}
				c.measureBatches(s.cfg, sets, methods, dir == "d2h", uintptr(sz))
				var out []result
				for _, rs := range sets {
					out = append(out, rs.out...)
				}
				return out
			}})
		}
	}
	return append(cs, benchCase{name: "batch-calibration", group: "calibration", custom: c.calibration})
}

// lacks says why the driver cannot run method, a capability it lacks (the batch API before CUDA
// 13.0: its rows are N/A, not failures), or returns "".
func (c *batchSuite) lacks(method copyengine.Method) string {
	if method != copyengine.MethodBatchAPI {
		return ""
	}
	err := c.dev.MemcpyBatchSupported()
	if v, verr := cuda.DriverVersion(); err == nil || verr != nil || v >= 13000 {
		return "" // a 13.0 driver without it: copyengine.New says so, as a failure
	}
	return fmt.Sprintf("%sthe batch API (%s): %v", lacksNote, cuda.CapBatchAPI, err)
}

// calibration reports the calibration of MethodAuto on the device (copyengine/calibrate.go), the
// tier's copy engine's: each cell's bandwidth by method and the method chosen (calibration.go
// prints them).
func (c *batchSuite) calibration(*suite) []result {
	rs := resultSet{c: "batch-calibration", impl: "pinmalloc-auto"}
	b, err := copyengine.New(cuda.Wrap[*pcuda.Device](c.dev), copyengine.Options{TrustNoOverlap: true})
	if err != nil {
		rs.fail(err)
		return rs.out
	}
	defer func() {
		if err := b.Close(); err != nil {
			rs.fail(err)
		}
	}()
	cal, err := b.Calibration()
	if err != nil {
		rs.fail(err)
		return rs.out
	}
	rs.add("took_ms", float64(cal.Took.Microseconds())/1e3, "ms")
	out := rs.out
	for _, cell := range cal.Cells {
		name := calibrationCase(cell.Size, cell.Count)
		for _, m := range batchMethods {
			if v := cell.GBps[m.m]; v > 0 {
				out = append(out, result{Case: name, Impl: m.name, Metric: "gbps", Value: v, Unit: "GB/s"})
			}
		}
		out = append(out, result{Case: name, Impl: calibrationChosen, Metric: "method", Value: float64(cell.Choice), Note: cell.Choice.String()},
			result{Case: name, Impl: calibrationChosen, Metric: "jobs_timed", Value: float64(cell.Jobs)})
	}
	return out
}

// measureBatch times n batches of one method queued on the suite's stream and one synchronize.
func (c *batchSuite) measureBatch(cfg *config, rs *resultSet, method copyengine.Method, toHost bool, size uintptr) {
	c.measureBatches(cfg, []*resultSet{rs}, []copyengine.Method{method}, toHost, size)
}

// measureBatches times the batches of each of methods in rounds (interleave), each round every
// method once, and records each one's bandwidth, the spread of its rounds and its CPU time per
// job, or its error, into the set of the same index.
func (c *batchSuite) measureBatches(cfg *config, sets []*resultSet, methods []copyengine.Method,
	toHost bool, size uintptr) {
	n := batchBytes / int(size)
	var cs []contender
	var closes []func() error
	var measured []*resultSet
	for i, m := range methods {
		run, closeB, err := c.batchRunner(m, toHost, size)
		if err != nil {
			sets[i].fail(err)
			continue
		}
		cs, closes = append(cs, contender{run, 1}), append(closes, closeB)
		measured = append(measured, sets[i])
	}
	outs := interleave(cudaConfig(cfg), cs)
	for i, rs := range measured {
		if err := errors.Join(outs[i].err, closes[i]()); err != nil {
			rs.fail(err)
			continue
		}
		m := outs[i].m
		rs.add("gbps", batchBytes/m.nsPerOp, "GB/s")
		rs.add("cpu_ns_per_job", m.cpuNsPerOp/float64(n), "ns")
		if m.spread > 0 {
			rs.add("round_spread", m.spread, "ratio")
		}
	}
}

// batchRunner opens a copy engine of method and returns the runner that times k batches of
// batchBytes in blocks of size bytes, queued on the suite's stream, and one synchronize, and
// what closes the engine. One batch is run before it returns (first touch of the pages and
// mappings), out of the calibration.
func (c *batchSuite) batchRunner(method copyengine.Method, toHost bool, size uintptr) (
	run runner, closeB func() error, err error) {
	if why := c.lacks(method); why != "" {
		return nil, nil, errors.New(why)
	}
	b, err := copyengine.New(cuda.Wrap[*pcuda.Device](c.dev), copyengine.Options{Method: method, TrustNoOverlap: true})
	if err != nil {
		return nil, nil, err
	}
	n := batchBytes / int(size)
	perm := rand.New(rand.NewPCG(uint64(size), 3)).Perm(n)
	jobs := make([]copyengine.Job, n)
	for i, p := range perm {
		h, d := pcuda.DevicePtr(c.host+uintptr(i)*2*size), pcuda.DevicePtr(uintptr(c.d)+uintptr(p)*2*size)
		jobs[i] = copyengine.Job{Dst: d, Src: h, Len: int(size)}
		if toHost {
			jobs[i] = copyengine.Job{Dst: h, Src: d, Len: int(size)}
		}
	}
	run = func(k int) (time.Duration, error) {
		t0 := time.Now()
		for range k {
			if err := b.Copy(jobs, pcuda.Stream(c.s)); err != nil {
				return 0, err
			}
		}
		err := c.dev.StreamSynchronize(c.s)
		return time.Since(t0), err
	}
	if _, err := run(1); err != nil {
		return nil, nil, errors.Join(err, b.Close())
	}
	return run, b.Close, nil
}

// targets (issue 9): the kernel at 48 GB/s or more each way for every block size, and 10 times
// one copy per block at 4 KiB, NOISY where the rounds of the bandwidths disagree by more than
// the margin (noise.go); N/A on the fake driver (its kernel is the CPU's memcpy).
func (c *batchSuite) targets(rs []result) []target {
	var ts []target
	for _, dir := range batchDirs {
		for _, sz := range batchSizes {
			c := "batch-" + dir + "/" + sizeName(sz)
			k, ok := lookup(rs, c, "pinmalloc-kernel", "gbps")
			ts = append(ts, noiseOf(rs, ratio("kernel-"+dir+"/"+sizeName(sz), "pinmalloc-kernel GB/s / 48 >= 1 ("+c+")",
				k, 48, ok, 1, false, fmt.Sprintf("pinmalloc-kernel %.2f GB/s", k)), [2]string{c, "pinmalloc-kernel"}))
		}
		c := "batch-" + dir + "/" + sizeName(4<<10)
		k, ok1 := lookup(rs, c, "pinmalloc-kernel", "gbps")
		p, ok2 := lookup(rs, c, "cuda-per-copy", "gbps")
		ts = append(ts, noiseOf(rs, ratio("kernel-vs-per-copy-"+dir+"/4KiB", "pinmalloc-kernel / cuda-per-copy gbps >= 10 ("+c+")",
			k, p, ok1 && ok2, 10, false, fmt.Sprintf("pinmalloc-kernel %.2f GB/s, cuda-per-copy %.2f GB/s", k, p)),
			[2]string{c, "pinmalloc-kernel"}, [2]string{c, "cuda-per-copy"}))
	}
	if c.fake {
		return onFakeDriver(ts)
	}
	return ts
}
