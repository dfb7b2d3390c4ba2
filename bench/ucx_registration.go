package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// The UCX suite's registration row (ucx.go).

// registration measures 1,000 buffers made ready for remote access, both ways, interleaved,
// and stops between rounds when ctx ends.
func (b *ucxBenchState) registration(ctx context.Context) ([]ucxRow, error) {
	const n, size = 1000, 16 << 10
	uc, err := ucx.NewContext("bench-registration")
	if err != nil {
		return nil, err
	}
	defer uc.Close()
	var poolTimes, eachTimes []float64
	var f regFigures
	// ordinary memory: registration is what is measured
	newPool := func() (*pinned.Pool, error) { return ucxPool(nil) }
	for range b.rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if f, err = registrationRound(b.w, uc, newPool, n, size); err != nil {
			return nil, err
		}
		poolTimes, eachTimes = append(poolTimes, f.poolTime), append(eachTimes, f.eachTime)
	}
	pt, et := median(poolTimes), median(eachTimes)
	return []ucxRow{{Case: "registration/1000x16KiB", Remote: pt, Other: et, Ratio: et / pt,
		Detail: fmt.Sprintf("µs: pool %.0f (%d ucp_mem_map, %d B of keys, RSS +%d KiB) vs per buffer %.0f (%d ucp_mem_map, %d B of keys, RSS +%d KiB)",
			pt, f.poolMaps, f.poolKeys, f.poolRSS>>10, et, f.eachMaps, f.eachKeys, f.eachRSS>>10)}}, nil
}

// regFigures are one registration round's figures: the time in µs, the resident memory added,
// the ucp_mem_map calls and the packed keys' bytes, the pool's way and per buffer.
type regFigures struct {
	poolTime, eachTime                   float64
	poolRSS, eachRSS, poolKeys, eachKeys int64
	poolMaps, eachMaps                   int64
}

// regMapper is what a registration round needs of a UCX context (*ucx.Context) for its
// registration per buffer.
type regMapper interface {
	MemMap(addr, n uintptr, memType int, nonblock bool) (ucx.Mem, error)
	PackRkey(m ucx.Mem) ([]byte, error)
	MemUnmap(m ucx.Mem) error
}

// registrationRound measures one round of the registration row: n buffers of size bytes of a
// pool newPool makes, registered by w's way (the pool's regions once, then a descriptor per
// buffer), then by one ucp_mem_map of uc and one packed key per buffer. Whatever happens, what it
// opened is closed before it returns: the registrations, the buffers and the pool (a round
// failing midway left its pool and its ucp_mem_map registrations behind, memory locked under
// the later steps).
func registrationRound(w *remote.Worker, uc regMapper, newPool func() (*pinned.Pool, error),
	n, size int) (f regFigures, err error) {
	pool, err := newPool()
	if err != nil {
		return f, err
	}
	bufs := make([][]byte, 0, n)
	defer func() {
		for _, buf := range bufs {
			err = errors.Join(err, pool.Free(buf))
		}
		err = errors.Join(err, pool.Close())
	}()
	for range n {
		buf, err := pool.Alloc(size)
		if err != nil {
			return f, err
		}
		bufs = append(bufs, buf)
	}
	if f.poolTime, f.poolRSS, f.poolMaps, f.poolKeys, err = registerPool(w, pool, bufs); err != nil {
		return f, err
	}
	f.eachTime, f.eachRSS, f.eachMaps, f.eachKeys, err = registerEach(uc, bufs)
	return f, err
}

// registerPool registers pool with w and describes each of bufs: the time in µs, the resident
// memory and the ucp_mem_map calls it added, and the distinct packed keys' bytes. The
// registration is closed before it returns.
func registerPool(w *remote.Worker, pool *pinned.Pool, bufs [][]byte) (
	us float64, rss, maps, keyBytes int64, err error) {
	maps0, rss0 := ucx.MemMaps(), residentBytes()
	start := time.Now()
	reg, err := w.Register(pool)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, reg.Close()) }()
	keys := map[string]bool{}
	for _, buf := range bufs {
		d, err := reg.Describe(buf)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		enc, _ := d.MarshalBinary()
		keys[string(enc[56:len(enc)-4])] = true
	}
	us = float64(time.Since(start).Nanoseconds()) / 1e3
	rss, maps = residentBytes()-rss0, ucx.MemMaps()-maps0
	for k := range keys {
		keyBytes += int64(len(k))
	}
	return us, rss, maps, keyBytes, nil
}

// registerEach registers each of bufs with uc (ucp_mem_map) and packs its key: the time in µs,
// the resident memory and the ucp_mem_map calls it added, and the keys' bytes. Every
// registration it made is undone before it returns.
func registerEach(uc regMapper, bufs [][]byte) (us float64, rss, maps, keyBytes int64, err error) {
	maps0, rss0 := ucx.MemMaps(), residentBytes()
	start := time.Now()
	mems := make([]ucx.Mem, 0, len(bufs))
	defer func() {
		for _, m := range mems {
			err = errors.Join(err, uc.MemUnmap(m))
		}
	}()
	for _, buf := range bufs {
		m, err := uc.MemMap(mem.Addr(buf), uintptr(len(buf)), ucx.MemoryHost, false)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		mems = append(mems, m)
		k, err := uc.PackRkey(m)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		keyBytes += int64(len(k))
	}
	us = float64(time.Since(start).Nanoseconds()) / 1e3
	rss, maps = residentBytes()-rss0, ucx.MemMaps()-maps0
	return us, rss, maps, keyBytes, nil
}

// residentBytes is the process's resident memory (VmRSS).
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}
