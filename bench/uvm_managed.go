package main

import (
	"errors"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// memAttachGlobal is CU_MEM_ATTACH_GLOBAL: managed memory any stream may use.
const memAttachGlobal = 1

// managed measures the driver's own tiering on the bytes of one batch of the block-size cases:
// managed memory populated on the device, moved to the host with cuMemPrefetchAsync the first
// time (cold: the host pages do not exist yet) and then, after each move back to the device,
// again (warm), each timed to the stream's completion. The fake driver's prefetch moves no
// bytes, so there the case records why it was not measured.
func (u *uvmSuite) managed(cfg *config) []result {
	rs := resultSet{c: "uvm-managed", impl: "managed"}
	if u.fake {
		rs.fail(errors.New("not measured on the fake driver: its cuMemPrefetchAsync moves no bytes"))
		return rs.out
	}
	if err := u.runManaged(cfg, &rs); err != nil {
		rs.fail(err)
	}
	return rs.out
}

func (u *uvmSuite) runManaged(cfg *config, rs *resultSet) (err error) {
	n := uintptr(u.geo.batch)
	p, err := u.dev.MemAllocManaged(n, memAttachGlobal)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.dev.MemFreeManaged(p)) }()
	dev, host := u.dev.Location(), cuda.HostLocation()
	move := func(to cuda.Location) (time.Duration, error) {
		t0 := time.Now()
		err := errors.Join(u.dev.MemPrefetchAsync(p, n, to, u.s), u.dev.StreamSynchronize(u.s))
		return time.Since(t0), err
	}
	if _, err := move(dev); err != nil {
		return err
	}
	if err := errors.Join(u.dev.MemsetD8Async(p, 1, n, u.s), u.dev.StreamSynchronize(u.s)); err != nil {
		return err
	}
	cold, err := move(host)
	if err != nil {
		return err
	}
	var warm, back time.Duration
	for range cfg.reps {
		d, err := move(dev)
		if err != nil {
			return err
		}
		back += d
		if d, err = move(host); err != nil {
			return err
		}
		warm += d
	}
	gb := float64(n) / 1e9
	rs.add("evict_cold_gbps", gb/cold.Seconds(), "GB/s")
	rs.add("evict_warm_gbps", gb*float64(cfg.reps)/warm.Seconds(), "GB/s")
	rs.add("restore_gbps", gb*float64(cfg.reps)/back.Seconds(), "GB/s")
	return nil
}
