package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// The UCX suite's registration row (ucx.go).

// registration measures 1,000 buffers made ready for remote access, both ways, interleaved.
func (b *ucxBenchState) registration() ([]ucxRow, error) {
	const n, size = 1000, 16 << 10
	ctx, err := ucx.NewContext("bench-registration")
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	var poolTimes, eachTimes []float64
	var poolRSS, eachRSS, poolKeys, eachKeys int64
	var poolMaps, eachMaps int64
	for range b.rounds {
		pool, err := ucxPool(nil) // ordinary memory: registration is what is measured
		if err != nil {
			return nil, err
		}
		bufs := make([][]byte, n)
		for i := range bufs {
			if bufs[i], err = pool.Alloc(size); err != nil {
				return nil, err
			}
		}
		// The pool's way: its regions once, then a descriptor per buffer.
		maps, rss := ucx.MemMaps(), residentBytes()
		start := time.Now()
		reg, err := b.w.Register(pool)
		if err != nil {
			return nil, err
		}
		keys := map[string]bool{}
		for _, buf := range bufs {
			d, err := reg.Describe(buf)
			if err != nil {
				return nil, err
			}
			enc, _ := d.MarshalBinary()
			keys[string(enc[56:len(enc)-4])] = true
		}
		poolTimes = append(poolTimes, float64(time.Since(start).Nanoseconds())/1e3)
		poolRSS, poolMaps = residentBytes()-rss, ucx.MemMaps()-maps
		poolKeys = 0
		for k := range keys {
			poolKeys += int64(len(k))
		}
		if err := reg.Close(); err != nil {
			return nil, err
		}
		// One ucp_mem_map and one packed key per buffer.
		maps, rss = ucx.MemMaps(), residentBytes()
		start = time.Now()
		mems := make([]ucx.Mem, n)
		eachKeys = 0
		for i, buf := range bufs {
			if mems[i], err = ctx.MemMap(mem.Addr(buf), uintptr(len(buf)), ucx.MemoryHost, false); err != nil {
				return nil, err
			}
			k, err := ctx.PackRkey(mems[i])
			if err != nil {
				return nil, err
			}
			eachKeys += int64(len(k))
		}
		eachTimes = append(eachTimes, float64(time.Since(start).Nanoseconds())/1e3)
		eachRSS, eachMaps = residentBytes()-rss, ucx.MemMaps()-maps
		for _, m := range mems {
			_ = ctx.MemUnmap(m)
		}
		for _, buf := range bufs {
			_ = pool.Free(buf)
		}
		_ = pool.Close()
	}
	pt, et := median(poolTimes), median(eachTimes)
	return []ucxRow{{Case: "registration/1000x16KiB", Remote: pt, Other: et, Ratio: et / pt,
		Detail: fmt.Sprintf("µs: pool %.0f (%d ucp_mem_map, %d B of keys, RSS +%d KiB) vs per buffer %.0f (%d ucp_mem_map, %d B of keys, RSS +%d KiB)",
			pt, poolMaps, poolKeys, poolRSS>>10, et, eachMaps, eachKeys, eachRSS>>10)}}, nil
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
