package main

import (
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/pinmalloc/pinmalloc/remote"
)

// The UCX suite's batch rows (ucx.go): KV blocks, each its own buffer, by remote, by
// ucx_perftest's puts at their size, and by Go net sockets.

// batch moves 1,000 blocks of 16 KiB, each its own buffer on both sides, by remote (both
// modes) and by Go net sockets, interleaved.
func (b *ucxBenchState) batch() ([]ucxRow, error) {
	const n, size = 1000, 16 << 10
	src := make([][]byte, n)
	for i := range src {
		var err error
		if src[i], err = b.pool.Alloc(size); err != nil {
			return nil, err
		}
		for j := range src[i] {
			src[i][j] = byte(i + j)
		}
	}
	defer func() {
		for _, s := range src {
			_ = b.pool.Free(s)
		}
	}()
	dst, err := b.peerAlloc(b.c, size, n)
	if err != nil {
		return nil, err
	}
	dstR, err := b.peerAlloc(b.cr, size, n)
	if err != nil {
		return nil, err
	}
	r, err := b.call(b.c, "net")
	if err != nil {
		return nil, err
	}
	sock, err := net.Dial("tcp", "127.0.0.1:"+string(r))
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	batch := func(c *remote.Conn, ds []remote.Descriptor) (float64, error) {
		t := c.NewTransfer()
		for i := range src {
			if err := t.Put(src[i], ds[i]); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		if err := t.Start(); err != nil {
			return 0, err
		}
		if err := t.Wait(b.ctx); err != nil {
			return 0, err
		}
		return float64(n*size) / time.Since(start).Seconds() / 1e6, nil
	}
	// The same blocks copied by Go between two sets of local buffers: the memory traffic a
	// batch by copy (pools of segments over shared memory) makes, 1,000 distinct blocks where
	// perftest's puts reuse one buffer in the cache.
	local := make([][]byte, n)
	for i := range local {
		if local[i], err = b.pool.Alloc(size); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, l := range local {
			_ = b.pool.Free(l)
		}
	}()
	copyBatch := func() float64 {
		start := time.Now()
		for i := range src {
			copy(local[i], src[i])
		}
		return float64(n*size) / time.Since(start).Seconds() / 1e6
	}
	var ours, rma, sockets, pt, like, copies []float64
	for range b.rounds {
		copies = append(copies, copyBatch())
		v, err := batch(b.c, dst)
		if err != nil {
			return nil, err
		}
		ours = append(ours, v)
		if v, err = batch(b.cr, dstR); err != nil {
			return nil, err
		}
		rma = append(rma, v)
		if v, err = netBatch(sock, src); err != nil {
			return nil, err
		}
		sockets = append(sockets, v)
		if b.perftest != "" {
			for _, l := range []bool{false, true} {
				if v, err = b.runPerftest(false, l, size, 4*n); err != nil {
					return nil, err
				}
				if l {
					like = append(like, v)
				} else {
					pt = append(pt, v)
				}
			}
		}
	}
	rows := []ucxRow{
		{Case: "batch/1000x16KiB", Size: size, Detail: "vs ucx_perftest ucp_put_bw at 16 KiB"},
		{Case: "cpu/1000x16KiB-vs-net", Size: size, Detail: "vs Go net: TCP on loopback, io.ReadFull into the peer's pool buffers"},
	}
	rows[0].compare(ours, rma, pt)
	rows[0].like(ours, like)
	if cr := ratios(ours, copies); len(cr) > 0 {
		rows[0].Detail += fmt.Sprintf("; Go's copy of the same 1,000 blocks here %.0f MB/s, remote ÷ it %.2f [%s]", median(slices.Clone(copies)), median(slices.Clone(cr)), spread(cr, 2))
	}
	rows[1].compare(ours, nil, sockets)
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "  %-22s remote %s MB/s, ModeRMA %s, competitor %s (ratio %s), perftest like remote %s (ratio %s)\n", r.Case,
			spread(r.Rounds.Remote, 0), spread(r.Rounds.RMA, 0), spread(r.Rounds.Other, 0), spread(r.Rounds.Ratio, 2), spread(r.Rounds.Like, 0), spread(r.Rounds.LikeRatio, 2))
	}
	_, _ = b.call(b.c, "free")
	_, _ = b.call(b.cr, "free")
	return rows, nil
}
