//go:build cgo && linux

package main

import (
	"errors"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// footprintDeviceLatency measures what a device heap's idle purge costs the allocations that
// run while it works: one stream churns 1,000 live blocks of 16 B to 8 KiB, timing every
// Alloc, while every devicePurgeEvery steps one of four other streams takes a burst of 256
// blocks of 8 B to 64 KiB (some 8 MiB) and frees them on itself, then stays quiet, so that the
// purger trims its heap (under the heap's mutex) and the arena decommits what it gave back
// while the churn goes on: with a purge delay of devicePurgeDelay, against the same with no
// purge (PurgeDelay -1). The two run in turn, three times each; a percentile is the median of
// its three runs. The case counts what the purging runs' bursts freed and what they gave back
// while the churn was timed (freed_bytes_per_run, purged_bytes_per_run, and the heaps trimmed,
// purges_per_run): the target needs purgeLatencyMinShare of the first given back. On the fake
// driver the case also records fakeDriverMetric: its device memory is host memory and its VMM
// calls a cost model, so its target reads N/A.
func footprintDeviceLatency(s *suite, dev *cuda.Device) []result {
	const name = "pinmalloc-device"
	if !s.cfg.implFilter.MatchString(name) {
		return nil
	}
	ops := 1_000_000
	if s.cfg.quick {
		ops = 300_000
	}
	rs := resultSet{c: "footprint/device-latency", impl: name}
	if fakecuda.IsFake(dev) {
		rs.add(fakeDriverMetric, 1, "bool") // its target reads N/A (footprintTargets)
	}
	var freed, purges uint64
	purged, errs := latencyRounds(&rs, func(purge bool) ([3]float64, uint64, error) {
		q, r, err := deviceLatencyRun(dev, purge, ops)
		if purge {
			freed, purges = freed+r.freed, purges+r.purges
		}
		return q, r.purged, err
	})
	if err := errors.Join(errs...); err != nil {
		rs.fail(err)
		return rs.out
	}
	rs.add("freed_bytes_per_run", float64(freed)/3, "B")   // freed by the bursts of the purging runs
	rs.add("purged_bytes_per_run", float64(purged)/3, "B") // decommitted while the churn ran
	rs.add("purges_per_run", float64(purges)/3, "heaps")   // stream heaps trimmed meanwhile
	return rs.out
}

// devicePurgeEvery is how many steps of the timed churn pass between two bursts on the
// other streams.
const devicePurgeEvery = 20_000

// devicePurgeDelay is the purge delay of footprintDeviceLatency's purging heap: a stream's
// heap is quiet four bursts (some 16 ms at -quick on the 2-vCPU VM) before its next, which at
// the default delay (10 ms) gave back one heap in three to eight, some 0 – 6 MiB a run.
const devicePurgeDelay = 2 * time.Millisecond

// deviceLatency is what a run of footprintDeviceLatency counted besides its Alloc times: the
// bytes the bursts freed, the bytes the arena decommitted and the stream heaps the purger
// trimmed while the churn ran.
type deviceLatency struct{ freed, purged, purges uint64 }

// deviceLatencyRun is one run of footprintDeviceLatency: the p50, p99 and p99.9 of the churn's
// Alloc times, and what it counted besides.
func deviceLatencyRun(dev *cuda.Device, purge bool, ops int) (
	q [3]float64, r deviceLatency, err error) {
	o := device.Options{Capacity: 1 << 30, PurgeDelay: devicePurgeDelay}
	if !purge {
		o.PurgeDelay = -1
	}
	h, err := device.New(cuda.Wrap[*pcuda.Device](dev), o)
	if err != nil {
		return q, r, err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	var streams []cuda.Stream
	defer func() {
		for _, st := range streams {
			err = errors.Join(err, h.ForgetStream(pcuda.Stream(st)), dev.StreamDestroy(st))
		}
	}()
	for range 5 {
		st, err := dev.StreamCreate(true)
		if err != nil {
			return q, r, err
		}
		streams = append(streams, st)
	}
	a := pcuda.Stream(streams[0])
	live := make([]pcuda.DevicePtr, 1_000)
	defer func() {
		for _, p := range live {
			if p != 0 {
				err = errors.Join(err, h.FreeAsync(p, a))
			}
		}
		err = errors.Join(err, dev.StreamSynchronize(streams[0]))
	}()
	burst := make([]pcuda.DevicePtr, 0, 256)
	ns := make([]int64, 0, ops)
	st := h.Stats()
	purges, purged := st.Purges, st.Arena.Purged
	for k := range ops {
		if k%devicePurgeEvery == devicePurgeEvery-1 {
			o := pcuda.Stream(streams[1+k/devicePurgeEvery%4])
			for j := range cap(burst) {
				n := larsonSize(larsonDraw(11, uint64(k+j)), 8, 64<<10)
				p, err := h.Alloc(n, o)
				if err != nil {
					return q, r, err
				}
				burst, r.freed = append(burst, p), r.freed+uint64(n)
			}
			for _, p := range burst {
				if err := h.FreeAsync(p, o); err != nil {
					return q, r, err
				}
			}
			burst = burst[:0]
		}
		z := larsonDraw(12, uint64(k))
		i := int((z >> 32) * uint64(len(live)) >> 32)
		if live[i] != 0 {
			if err := h.FreeAsync(live[i], a); err != nil {
				return q, r, err
			}
			live[i] = 0
		}
		t0 := time.Now()
		p, err := h.Alloc(larsonSize(z, 16, 8<<10), a)
		ns = append(ns, int64(time.Since(t0)))
		if err != nil {
			return q, r, err
		}
		live[i] = p
	}
	st = h.Stats()
	r.purges, r.purged = st.Purges-purges, st.Arena.Purged-purged
	return percentiles(ns), r, nil
}
