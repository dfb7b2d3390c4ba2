//go:build cgo && linux

package main

import (
	"errors"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// footprintDeviceLatency measures what a device heap's idle purge costs the allocations that
// run while it works: one stream churns 1,000 live blocks of 16 B to 8 KiB, timing every
// Alloc, while every devicePurgeEvery steps one of four other streams takes a burst of 256
// blocks of 8 B to 64 KiB and frees them on itself, then stays quiet, so that the purger
// trims its heap (under the heap's mutex) while the churn goes on; against the same with no
// purge (PurgeDelay -1). The two run in turn, three times each; a percentile is the median of
// its three runs.
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
	purges, errs := latencyRounds(&rs, func(purge bool) ([3]float64, uint64, error) { return deviceLatencyRun(dev, purge, ops) })
	if err := errors.Join(errs...); err != nil {
		rs.fail(err)
		return rs.out
	}
	rs.add("purges_per_run", float64(purges)/3, "heaps") // stream heaps trimmed while the churn ran
	return rs.out
}

// devicePurgeEvery is how many steps of the timed churn pass between two bursts on the
// other streams.
const devicePurgeEvery = 20_000

// deviceLatencyRun is one run of footprintDeviceLatency: the p50, p99 and p99.9 of the churn's
// Alloc times, and the stream heaps the purger trimmed meanwhile.
func deviceLatencyRun(dev *cuda.Device, purge bool, ops int) (q [3]float64, purges uint64, err error) {
	o := device.Options{Capacity: 1 << 30}
	if !purge {
		o.PurgeDelay = -1
	}
	h, err := device.New(cuda.Wrap[*pcuda.Device](dev), o)
	if err != nil {
		return q, 0, err
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
			return q, 0, err
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
	before := h.Stats().Purges
	for k := range ops {
		if k%devicePurgeEvery == devicePurgeEvery-1 {
			o := pcuda.Stream(streams[1+k/devicePurgeEvery%4])
			for j := range cap(burst) {
				p, err := h.Alloc(larsonSize(larsonDraw(11, uint64(k+j)), 8, 64<<10), o)
				if err != nil {
					return q, 0, err
				}
				burst = append(burst, p)
			}
			for _, p := range burst {
				if err := h.FreeAsync(p, o); err != nil {
					return q, 0, err
				}
			}
			burst = burst[:0]
		}
		z := larsonDraw(12, uint64(k))
		i := int((z >> 32) * uint64(len(live)) >> 32)
		if live[i] != 0 {
			if err := h.FreeAsync(live[i], a); err != nil {
				return q, 0, err
			}
			live[i] = 0
		}
		t0 := time.Now()
		p, err := h.Alloc(larsonSize(z, 16, 8<<10), a)
		ns = append(ns, int64(time.Since(t0)))
		if err != nil {
			return q, 0, err
		}
		live[i] = p
	}
	return percentiles(ns), h.Stats().Purges - before, nil
}
