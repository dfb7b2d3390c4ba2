package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// The UCX suite (-ucx: issue 39) measures package remote against UCX's own ucx_perftest on the
// same transport, in the same run, the competitors interleaved round by round:
//
//   - registration of 1,000 pool buffers: a pool registered once per region (remote.Register,
//     then a descriptor per buffer) against one ucp_mem_map and one packed key per buffer (what
//     NIXL did before its range cache); the time, the process's resident memory added, the
//     packed keys' bytes;
//   - put and get bandwidth, 4 KiB – 16 MiB: one Transfer of many operations of the size into
//     one buffer of the peer, against ucx_perftest ucp_put_bw and ucp_get (64 outstanding);
//     remote's default (messages, on a transport without hardware puts) and its ModeRMA (UCX's
//     puts and gets, emulated as perftest's are);
//   - a batch of 1,000 16 KiB blocks, each its own buffer on both sides (KV blocks), against
//     perftest's rate at 16 KiB;
//   - CPU-only: the same batch over plain Go net sockets (TCP on loopback, io.ReadFull into the
//     peer's pool buffers), against remote over UCX's tcp.
//
// The peer is this program again (ucxPeerEnv set); UCX_TLS and UCX_NET_DEVICES, set for both
// and for perftest, choose the transport (default tcp on lo).

const ucxPeerEnv = "PINMALLOC_BENCH_UCX_PEER"

var ucxSizes = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

type ucxRow struct {
	Case   string  `json:"case"`
	Size   int     `json:"size,omitempty"`
	Remote float64 `json:"remote"`           // MB/s (10^6 bytes), or µs for the registration rows
	RMA    float64 `json:"rma,omitempty"`    // remote with ModeRMA
	Other  float64 `json:"other,omitempty"`  // perftest's, Go net's, or the per-buffer registration's
	Ratio  float64 `json:"ratio,omitempty"`  // Remote / Other (Other / Remote for costs)
	Detail string  `json:"detail,omitempty"` // what else was measured
}

func ucxBench(cfg *config) int {
	if os.Getenv(ucxPeerEnv) != "" {
		if err := ucxPeer(); err != nil {
			fmt.Println("E", err)
			return 1
		}
		return 0
	}
	if os.Getenv("UCX_TLS") == "" {
		os.Setenv("UCX_TLS", "tcp")
		os.Setenv("UCX_NET_DEVICES", "lo")
	}
	tls := "UCX_TLS=" + os.Getenv("UCX_TLS") + " UCX_NET_DEVICES=" + os.Getenv("UCX_NET_DEVICES")
	rounds := 5
	if cfg.quick {
		rounds = 3
	}
	fmt.Fprintf(os.Stderr, "bench -ucx: %s, %d rounds, load %s\n", tls, rounds, loadAvg())
	b, err := newUCXBench(rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench -ucx:", err)
		return 1
	}
	defer b.close()
	var rows []ucxRow
	for _, step := range []func() ([]ucxRow, error){b.registration, b.bandwidth, b.batch} {
		rs, err := step()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench -ucx:", err)
			return 1
		}
		rows = append(rows, rs...)
	}
	out := newFitWriter(os.Stdout, cfg.width())
	printUCX(out, tls, loadAvg(), rows)
	out.Flush()
	if err := os.MkdirAll(cfg.out, 0o755); err == nil {
		name := "ucx-" + cfg.name + ".json"
		data, _ := json.MarshalIndent(map[string]any{"transport": tls, "load": loadAvg(), "rows": rows}, "", "  ")
		if err := os.WriteFile(filepath.Join(cfg.out, name), data, 0o644); err == nil {
			fmt.Fprintln(os.Stderr, "bench -ucx: wrote", filepath.Join(cfg.out, name))
		}
	}
	return 0
}

// ucxBenchState is this side: two workers (default mode and ModeRMA) connected to the peer,
// a registered pool, and perftest where installed.
type ucxBenchState struct {
	rounds   int
	pool     *pinned.Pool
	w, wr    *remote.Worker
	c, cr    *remote.Conn
	reg, rr  *remote.Registration
	peer     *exec.Cmd
	perftest string
	ctx      context.Context
}

func ucxPool() (*pinned.Pool, error) {
	o := pinned.Options{Capacity: 1 << 30}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && os.Geteuid() != 0 && lim.Cur < 256<<20 {
		o.Backend = pinned.Pageable
	}
	return pinned.New(o)
}

func newUCXBench(rounds int) (*ucxBenchState, error) {
	b := &ucxBenchState{rounds: rounds, ctx: context.Background()}
	b.perftest, _ = exec.LookPath("ucx_perftest")
	var err error
	if b.pool, err = ucxPool(); err != nil {
		return nil, err
	}
	shm := os.Getenv("PINMALLOC_BENCH_SHM") != ""
	if b.w, err = remote.New(remote.Options{Name: "bench", SharedMemory: shm}); err != nil {
		return nil, err
	}
	if b.wr, err = remote.New(remote.Options{Name: "bench-rma", Mode: remote.ModeRMA, SharedMemory: shm}); err != nil {
		return nil, err
	}
	if b.reg, err = b.w.Register(b.pool); err != nil {
		return nil, err
	}
	if b.rr, err = b.wr.Register(b.pool); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b.peer = exec.Command(self, "-ucx")
	b.peer.Env = append(os.Environ(), ucxPeerEnv+"=1")
	b.peer.Stderr = os.Stderr
	out, err := b.peer.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := b.peer.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "L ") {
		return nil, fmt.Errorf("peer: %q %v", line, err)
	}
	addr, err := hex.DecodeString(strings.TrimSpace(line[2:]))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if b.c, err = b.w.Dial(ctx, addr); err != nil {
		return nil, err
	}
	if b.cr, err = b.wr.Dial(ctx, addr); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *ucxBenchState) close() {
	if b.c != nil {
		_ = b.c.Send(b.ctx, []byte("quit"))
	}
	if b.peer != nil && b.peer.Process != nil {
		done := make(chan error, 1)
		go func() { done <- b.peer.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = b.peer.Process.Kill()
		}
	}
	for _, w := range []*remote.Worker{b.w, b.wr} {
		if w != nil {
			_ = w.Close()
		}
	}
	if b.pool != nil {
		_ = b.pool.Close()
	}
}

// call sends a command to the peer on c and returns its reply.
func (b *ucxBenchState) call(c *remote.Conn, cmd string) ([]byte, error) {
	if err := c.Send(b.ctx, []byte(cmd)); err != nil {
		return nil, err
	}
	r, err := c.Recv(b.ctx)
	if err == nil && strings.HasPrefix(string(r), "E ") {
		err = errors.New(string(r))
	}
	return r, err
}

// peerAlloc asks the peer for k buffers of n bytes on c and returns their descriptors.
func (b *ucxBenchState) peerAlloc(c *remote.Conn, n, k int) ([]remote.Descriptor, error) {
	r, err := b.call(c, fmt.Sprintf("alloc %d %d", n, k))
	if err != nil {
		return nil, err
	}
	var ds []remote.Descriptor
	for len(r) > 0 {
		d, rest, err := remote.ParseDescriptor(r)
		if err != nil {
			return nil, err
		}
		ds, r = append(ds, d), rest
	}
	return ds, nil
}

// transferMBs moves count operations of size bytes between src and dst on c (gets when get)
// and returns MB/s.
func transferMBs(ctx context.Context, c *remote.Conn, get bool, src []byte, dst remote.Descriptor, size, count int) (float64, error) {
	t := c.NewTransfer()
	for range count {
		var err error
		if get {
			err = t.Get(src[:size], dst)
		} else {
			err = t.Put(src[:size], dst)
		}
		if err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if err := t.Start(); err != nil {
		return 0, err
	}
	if err := t.Wait(ctx); err != nil {
		return 0, err
	}
	return float64(size*count) / time.Since(start).Seconds() / 1e6, nil
}

// opsFor is the number of operations of size bytes in one measurement: 64 MiB's worth, 16 to
// 16384.
func opsFor(size int) int { return min(16384, max(16, (64<<20)/size)) }

func (b *ucxBenchState) bandwidth() ([]ucxRow, error) {
	var rows []ucxRow
	for _, size := range ucxSizes {
		src, err := b.pool.Alloc(size)
		if err != nil {
			return nil, err
		}
		dst, err := b.peerAlloc(b.c, size, 1)
		if err != nil {
			return nil, err
		}
		dstR, err := b.peerAlloc(b.cr, size, 1)
		if err != nil {
			return nil, err
		}
		for _, get := range []bool{false, true} {
			var ours, rma, pt []float64
			for range b.rounds {
				v, err := transferMBs(b.ctx, b.c, get, src, dst[0], size, opsFor(size))
				if err != nil {
					return nil, err
				}
				ours = append(ours, v)
				if v, err = transferMBs(b.ctx, b.cr, get, src, dstR[0], size, opsFor(size)); err != nil {
					return nil, err
				}
				rma = append(rma, v)
				if b.perftest != "" {
					v, err := b.runPerftest(get, size, opsFor(size))
					if err != nil {
						return nil, err
					}
					pt = append(pt, v)
				}
			}
			name := "put"
			if get {
				name = "get"
			}
			r := ucxRow{Case: name + "/" + sizeName(int64(size)), Size: size, Remote: median(ours), RMA: median(rma)}
			if len(pt) > 0 {
				r.Other = median(pt)
				r.Ratio = r.Remote / r.Other
			}
			fmt.Fprintf(os.Stderr, "  %-10s remote %.0f MB/s, remote RMA mode %.0f, ucx_perftest %.0f\n", r.Case, r.Remote, r.RMA, r.Other)
			rows = append(rows, r)
		}
		if _, err := b.call(b.c, "free"); err != nil {
			return nil, err
		}
		if _, err := b.call(b.cr, "free"); err != nil {
			return nil, err
		}
		if err := b.pool.Free(src); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

var perftestFinal = regexp.MustCompile(`^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s*$`)

// runPerftest runs ucx_perftest's server and client on this host with the same UCX
// environment and returns the client's overall bandwidth in MB/s (10^6 bytes).
func (b *ucxBenchState) runPerftest(get bool, size, iters int) (float64, error) {
	port := 20000 + os.Getpid()%20000
	srv := exec.Command(b.perftest, "-p", fmt.Sprint(port))
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	args := []string{"127.0.0.1", "-p", fmt.Sprint(port), "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters), "-w", fmt.Sprint(max(10, iters/10)), "-f"}
	if get {
		args = append(args, "-t", "ucp_get", "-O", "64")
	} else {
		args = append(args, "-t", "ucp_put_bw")
	}
	var out []byte
	var err error
	for try := 0; try < 50; try++ { // the server needs a moment to listen
		out, err = exec.Command(b.perftest, args...).CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return 0, fmt.Errorf("ucx_perftest %s: %v: %s", strings.Join(args, " "), err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if m := perftestFinal.FindStringSubmatch(l); m != nil {
			mib, _ := strconv.ParseFloat(m[6], 64) // overall bandwidth, MiB/s
			return mib * (1 << 20) / 1e6, nil
		}
	}
	return 0, fmt.Errorf("no result in ucx_perftest's output: %s", out)
}

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
	var ours, rma, sockets, pt []float64
	for range b.rounds {
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
			if v, err = b.runPerftest(false, size, 4*n); err != nil {
				return nil, err
			}
			pt = append(pt, v)
		}
	}
	rows := []ucxRow{
		{Case: "batch/1000x16KiB", Size: size, Remote: median(ours), RMA: median(rma), Detail: "vs ucx_perftest ucp_put_bw at 16 KiB"},
		{Case: "cpu/1000x16KiB-vs-net", Size: size, Remote: median(ours), Other: median(sockets), Detail: "vs Go net: TCP on loopback, io.ReadFull into the peer's pool buffers"},
	}
	if len(pt) > 0 {
		rows[0].Other = median(pt)
		rows[0].Ratio = rows[0].Remote / rows[0].Other
	}
	rows[1].Ratio = rows[1].Remote / rows[1].Other
	_, _ = b.call(b.c, "free")
	_, _ = b.call(b.cr, "free")
	return rows, nil
}

func printUCX(w io.Writer, tls, load string, rows []ucxRow) {
	fmt.Fprintf(w, "\n## UCX (%s), load %s\n\n", tls, load)
	fmt.Fprintln(w, "| case | remote | remote, ModeRMA | competitor | ratio | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.2f | %s |\n", r.Case, r.Remote, r.RMA, r.Other, r.Ratio, r.Detail)
	}
}
