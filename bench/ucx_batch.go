package main

import (
	"context"
	"errors"
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
func (b *ucxBenchState) batch(ctx context.Context) ([]ucxRow, error) {
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
	defer func() { // the peer's blocks, freed however the batch ends: none left for the next step
		ctx, cancel := cleanupCtx(ctx)
		defer cancel()
		_, _ = b.call(ctx, b.c, "free")
		_, _ = b.call(ctx, b.cr, "free")
	}()
	dst, err := b.peerAlloc(ctx, b.c, size, n)
	if err != nil {
		return nil, err
	}
	dstR, err := b.peerAlloc(ctx, b.cr, size, n)
	if err != nil {
		return nil, err
	}
	r, err := b.call(ctx, b.c, "net")
	if err != nil {
		return nil, err
	}
	var dialer net.Dialer
	sock, err := dialer.DialContext(ctx, "tcp", "127.0.0.1:"+string(r))
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	if d, ok := ctx.Deadline(); ok { // the Go net batch's reads and writes end with the step
		_ = sock.SetDeadline(d)
	}
	t, tr := b.c.NewTransfer(), b.cr.NewTransfer()
	batch := func(t *remote.Transfer, ds []remote.Descriptor) (mbs, onCPU float64, err error) {
		for i := range src {
			if err := t.Put(src[i], ds[i]); err != nil {
				return 0, 0, errors.Join(err, t.Reset())
			}
		}
		return runTimed(ctx, t)
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
	// A warm-up of each, untimed, as perftest's (-w): the first touch of the blocks, here and
	// in the peer's mappings, is not the batch's.
	copyBatch()
	for _, w := range []struct {
		t  *remote.Transfer
		ds []remote.Descriptor
	}{{t, dst}, {tr, dstR}} {
		if _, _, err := batch(w.t, w.ds); err != nil {
			return nil, err
		}
	}
	var ours, rma, sockets, pt, like, copies, cpu []float64
	for range b.rounds {
		copies = append(copies, copyBatch())
		v, f, err := batch(t, dst)
		if err != nil {
			return nil, err
		}
		ours, cpu = append(ours, v), append(cpu, f)
		if v, _, err = batch(tr, dstR); err != nil {
			return nil, err
		}
		rma = append(rma, v)
		if v, err = netBatch(sock, src); err != nil {
			return nil, err
		}
		sockets = append(sockets, v)
		if b.perftest != "" {
			for _, l := range []bool{false, true} {
				if v, err = b.runPerftest(ctx, false, l, size, 4*n); err != nil {
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
	rows[0].onCPU(cpu)
	rows[1].compare(ours, nil, sockets)
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "  %-22s remote %s MB/s, ModeRMA %s, competitor %s (ratio %s), perftest like remote %s (ratio %s)\n", r.Case,
			spread(r.Rounds.Remote, 0), spread(r.Rounds.RMA, 0), spread(r.Rounds.Other, 0), spread(r.Rounds.Ratio, 2), spread(r.Rounds.Like, 0), spread(r.Rounds.LikeRatio, 2))
	}
	return rows, nil
}
