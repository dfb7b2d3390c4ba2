package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// The UCX suite (-ucx: issue 39) measures package remote against UCX's own ucx_perftest on the
// same transport, in the same run, the competitors interleaved round by round (each round's
// ratio taken against the competitor measured next to it; medians and the rounds' spread):
//
//   - registration of 1,000 pool buffers: a pool registered once per region (remote.Register,
//     then a descriptor per buffer) against one ucp_mem_map and one packed key per buffer (what
//     NIXL did before its range cache); the time, the process's resident memory added, the
//     packed keys' bytes;
//   - put and get bandwidth, 4 KiB – 16 MiB: one Transfer of many operations of the size into
//     one buffer of the peer; remote's default (ModeAuto: messages on these transports) and
//     its ModeRMA (UCX's puts and gets, which UCX emulates with its own messages here), against
//     two runs of ucx_perftest ucp_put_bw and ucp_get (64 outstanding): as it runs by default
//     (memory UCX allocates itself: over shared memory, a segment the peer maps, so a put is a
//     memcpy by the initiator; no failure handling), and like remote (-e: failure handling, as
//     remote's TCP connections have; over shared memory, ordinary memory, UCX_ALLOC_PRIO=mmap,
//     as a pool's regions are);
//   - a batch of 1,000 16 KiB blocks, each its own buffer on both sides (KV blocks), against
//     perftest's put rate at 16 KiB;
//   - CPU-only: the same batch over plain Go net sockets (TCP on loopback, io.ReadFull into the
//     peer's pool buffers), against remote over UCX's tcp.
//
// The peer is this program again (ucxPeerEnv set); UCX_TLS and UCX_NET_DEVICES, set for both
// and for perftest, choose the transport (default tcp on lo). -cases selects rows by name
// (put/64KiB, get/, batch, registration), -ucx-rounds the rounds, -ucx-step-limit the time a
// step may take (ucx_steps.go).

const ucxPeerEnv = "PINMALLOC_BENCH_UCX_PEER"

var ucxSizes = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

type ucxRow struct {
	Case   string  `json:"case"`
	Size   int     `json:"size,omitempty"`
	Remote float64 `json:"remote,omitempty"` // MB/s (10^6 bytes), or µs for the registration rows: the median
	RMA    float64 `json:"rma,omitempty"`    // remote with ModeRMA
	Other  float64 `json:"other,omitempty"`  // perftest's, Go net's, or the per-buffer registration's
	Ratio  float64 `json:"ratio,omitempty"`  // the median of the rounds' Remote / Other (Other / Remote for costs)
	Like   float64 `json:"like,omitempty"`   // perftest run like remote (failure handling; ordinary memory)
	LikeR  float64 `json:"like_ratio,omitempty"`
	Detail string  `json:"detail,omitempty"` // what else was measured
	Error  string  `json:"error,omitempty"`  // why its step failed (no figures then)
	// The spread: every round's figure, in the order taken (the competitors interleaved).
	Rounds struct {
		Remote, RMA, Other, Ratio, Like, LikeRatio []float64 `json:",omitempty"`
		OnCPU                                      []float64 `json:",omitempty"` // remote's: the fraction of each round's time its thread was on a CPU
	} `json:"rounds"`
}

// ucxCompare fills r's medians and rounds from the rounds' figures of each competitor; the
// ratio is taken round by round (remote against the competitor measured next to it).
func (r *ucxRow) compare(ours, rma, other []float64) {
	r.Rounds.Remote, r.Rounds.RMA, r.Rounds.Other = slices.Clone(ours), slices.Clone(rma), slices.Clone(other)
	if len(ours) > 0 {
		r.Remote = median(slices.Clone(ours)) // median sorts what it is given
	}
	if len(rma) > 0 {
		r.RMA = median(slices.Clone(rma))
	}
	if len(other) > 0 {
		r.Other = median(slices.Clone(other))
	}
	r.Rounds.Ratio = ratios(ours, other)
	if len(r.Rounds.Ratio) > 0 {
		r.Ratio = median(slices.Clone(r.Rounds.Ratio))
	}
}

// like adds perftest's figures run like remote.
func (r *ucxRow) like(ours, like []float64) {
	r.Rounds.Like = slices.Clone(like)
	if len(like) > 0 {
		r.Like = median(slices.Clone(like))
	}
	r.Rounds.LikeRatio = ratios(ours, like)
	if len(r.Rounds.LikeRatio) > 0 {
		r.LikeR = median(slices.Clone(r.Rounds.LikeRatio))
	}
}

// ratios returns ours[i]/other[i], round by round (nil unless both have every round).
func ratios(ours, other []float64) []float64 {
	if len(ours) != len(other) || len(ours) == 0 {
		return nil
	}
	rs := make([]float64, len(ours))
	for i := range ours {
		rs[i] = ours[i] / other[i]
	}
	return rs
}

// spread returns "min–max" of xs, with prec decimals.
func spread(xs []float64, prec int) string {
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("%.*f–%.*f", prec, slices.Min(xs), prec, slices.Max(xs))
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
	if os.Getenv(ucxSegmentsEnv) != "" {
		tls += ", pools of UCX segments"
	}
	rounds := 5
	if cfg.quick {
		rounds = 3
	}
	if cfg.ucxRounds > 0 {
		rounds = cfg.ucxRounds
	}
	fmt.Fprintf(os.Stderr, "bench -ucx: %s, %d rounds, load %s\n", tls, rounds, loadAvg())
	limit := cfg.ucxLimit
	if limit <= 0 {
		limit = ucxStepLimit(rounds)
	}
	b := &ucxBenchState{rounds: rounds, filter: cfg.filter, peerCmd: ucxPeerCmd}
	defer b.close()
	// Setting up (the peer started, its address read, the connections made) is bound as a
	// step is: a peer that hangs before it listens ends the run, it does not hang it.
	setup, cancel := context.WithTimeout(context.Background(), limit)
	err := b.open(setup)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench -ucx:", err)
		return 1
	}
	if b.perftest == "" {
		fmt.Fprintln(os.Stderr, "bench -ucx: no ucx_perftest on the PATH (Debian's ucx-utils): the rows against it are not measured")
	}
	rows, failed := runUCXSteps(context.Background(), b.filter, b.steps(), limit)
	return finishUCX(os.Stdout, os.Stderr, cfg, tls, rows, failed)
}

// finishUCX prints the suite's table on out, writes its JSON (writeUCXResults) and returns
// the run's exit status: 1 when a step failed (named on errOut; the table and the JSON say
// why) or the results could not be written, else 0.
func finishUCX(out, errOut io.Writer, cfg *config, tls string, rows []ucxRow, failed []string) int {
	w := newFitWriter(out, cfg.width())
	printUCX(w, tls, loadAvg(), rows)
	w.Flush()
	status := 0
	path, err := writeUCXResults(cfg.out, cfg.name, tls, rows)
	if err != nil {
		fmt.Fprintln(errOut, "bench -ucx: writing the results:", err)
		status = 1
	} else {
		fmt.Fprintln(errOut, "bench -ucx: wrote", path)
	}
	if len(failed) > 0 {
		w := newFitWriter(errOut, cfg.width())
		fmt.Fprintf(w, "bench -ucx: %d of its steps failed (the table says why): %s\n",
			len(failed), strings.Join(failed, "; "))
		w.Flush()
		status = 1
	}
	return status
}

// writeUCXResults writes the suite's rows, with the transport and the load, into
// dir/ucx-NAME.json and returns that path.
func writeUCXResults(dir, name, tls string, rows []ucxRow) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(map[string]any{"transport": tls, "load": loadAvg(), "rows": rows}, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "ucx-"+name+".json")
	return path, os.WriteFile(path, data, 0o644)
}

// ucxBenchState is this side: two workers (default mode and ModeRMA) connected to the peer,
// a registered pool, and perftest where installed.
type ucxBenchState struct {
	rounds   int
	filter   *regexp.Regexp // the rows to measure
	pool     *pinned.Pool
	w, wr    *remote.Worker
	c, cr    *remote.Conn
	reg, rr  *remote.Registration
	peer     *exec.Cmd
	peerCmd  func() (*exec.Cmd, error) // the peer's command (ucxPeerCmd; tests start others)
	peerIn   io.WriteCloser            // the peer's stdin: it ends when this is closed
	perftest string
	// lost says why the peer's connections take no more commands (call): a command whose
	// answer did not come before its step's time ran out (a late answer would be taken for
	// the next command's).
	lost error
}

// ucxSegmentsEnv, set with PINMALLOC_BENCH_SHM, makes both sides' pools of UCX-allocated
// segments (remote.SegmentSource of w): puts and gets by one copy, where perftest's are.
const ucxSegmentsEnv = "PINMALLOC_BENCH_SEGMENTS"

// ucxPool returns a pool for the bench: of w's segments with ucxSegmentsEnv (and w), else
// locked memory, or pageable below a memlock limit of 256 MiB.
func ucxPool(w *remote.Worker) (*pinned.Pool, error) {
	o := pinned.Options{Capacity: 1 << 30}
	var lim unix.Rlimit
	low := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && os.Geteuid() != 0 && lim.Cur < 256<<20
	switch {
	case w != nil && os.Getenv(ucxSegmentsEnv) != "":
		o.Source = w.SegmentSource(remote.SegmentOptions{Pageable: low})
	case low:
		o.Backend = pinned.Pageable
	}
	return pinned.New(o)
}

// ucxPeerCmd is the peer's command: this program again, ucxPeerEnv set.
func ucxPeerCmd() (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-ucx")
	cmd.Env = append(os.Environ(), ucxPeerEnv+"=1")
	cmd.Stderr = os.Stderr
	return cmd, nil
}

// open sets b up by the end of ctx: the workers, the pool and its registrations, the peer
// (b.peerCmd) started and connected to. Whether it fails or not, b.close undoes what it did.
func (b *ucxBenchState) open(ctx context.Context) error {
	b.perftest, _ = exec.LookPath("ucx_perftest")
	var err error
	shm := os.Getenv("PINMALLOC_BENCH_SHM") != ""
	if b.w, err = remote.New(remote.Options{Name: "bench", SharedMemory: shm}); err != nil {
		return err
	}
	if b.pool, err = ucxPool(b.w); err != nil {
		return err
	}
	if b.wr, err = remote.New(remote.Options{Name: "bench-rma", Mode: remote.ModeRMA, SharedMemory: shm}); err != nil {
		return err
	}
	if b.reg, err = b.w.Register(b.pool); err != nil {
		return err
	}
	if b.rr, err = b.wr.Register(b.pool); err != nil {
		return err
	}
	if b.peer, err = b.peerCmd(); err != nil {
		return err
	}
	// The peer ends when its stdin does (ucxPeer): when close closes this pipe, or when this
	// process dies.
	if b.peerIn, err = b.peer.StdinPipe(); err != nil {
		return err
	}
	addr, err := startPeer(ctx, b.peer)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if b.c, err = b.w.Dial(ctx, addr); err != nil {
		return err
	}
	if b.cr, err = b.wr.Dial(ctx, addr); err != nil {
		return err
	}
	return nil
}

// startPeer starts the peer, cmd, and returns the worker address it prints ("L <hex>") by the
// end of ctx. A peer that prints something else, or nothing by then (hung before it listens),
// is killed and waited for: its error is startPeer's, and no process is left behind.
func startPeer(ctx context.Context, cmd *exec.Cmd) (addr []byte, err error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // closes out: the read below ends
		}
	}()
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		got <- read{line, err}
	}()
	var r read
	select {
	case r = <-got:
	case <-ctx.Done():
		return nil, fmt.Errorf("peer: no address: %w", context.Cause(ctx))
	}
	if !strings.HasPrefix(r.line, "L ") {
		return nil, fmt.Errorf("peer: %q %v", r.line, r.err)
	}
	return hex.DecodeString(strings.TrimSpace(r.line[2:]))
}

// close undoes what open did, all of it or the part it did before it failed: the peer is
// told to quit, its stdin closed, and given 5 s, or killed at once where it could not be told
// (no connection made, or one that takes no more commands), and waited for; then the workers (their
// registrations with them) and the pool are closed.
func (b *ucxBenchState) close() {
	told := false
	if b.c != nil && b.lost == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		told = b.c.Send(ctx, []byte("quit")) == nil
		cancel()
	}
	if b.peerIn != nil {
		_ = b.peerIn.Close() // a peer that did not take the quit ends on this
	}
	if b.peer != nil && b.peer.Process != nil && b.peer.ProcessState == nil {
		if !told {
			_ = b.peer.Process.Kill()
		}
		done := make(chan error, 1)
		go func() { done <- b.peer.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = b.peer.Process.Kill()
			<-done
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

// ucxConn is what call needs of a connection to the peer (*remote.Conn).
type ucxConn interface {
	Send(ctx context.Context, msg []byte) error
	Recv(ctx context.Context) ([]byte, error)
}

// errPeerLost is call's error once a command's answer did not come in time.
var errPeerLost = errors.New("the peer takes no more commands")

// call sends a command to the peer on c and returns its reply. Once a command ran out of time
// (ctx ended before its answer came), every later call fails at once (b.lost): its answer,
// were it to come, would be read as the next command's.
func (b *ucxBenchState) call(ctx context.Context, c ucxConn, cmd string) ([]byte, error) {
	if b.lost != nil {
		return nil, b.lost
	}
	err := c.Send(ctx, []byte(cmd))
	var r []byte
	if err == nil {
		r, err = c.Recv(ctx)
	}
	if err != nil && ctx.Err() != nil {
		b.lost = fmt.Errorf("%w: no answer to %q came in time", errPeerLost, cmd)
	}
	if err == nil && strings.HasPrefix(string(r), "E ") {
		err = errors.New(string(r))
	}
	return r, err
}

// cleanupCtx returns a context for undoing what a step did when it ends, ctx's values without
// its end (a step that timed out still frees the peer's buffers), and 10 s for it.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// peerAlloc asks the peer for k buffers of n bytes on c and returns their descriptors.
func (b *ucxBenchState) peerAlloc(ctx context.Context, c *remote.Conn, n, k int) (
	[]remote.Descriptor, error) {
	r, err := b.call(ctx, c, fmt.Sprintf("alloc %d %d", n, k))
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

// transferMBs moves count operations of size bytes between src and dst with t, a transfer on
// the connection (gets when get): runTimed's figures.
func transferMBs(ctx context.Context, t *remote.Transfer, get bool, src []byte, dst remote.Descriptor, size, count int) (mbs, onCPU float64, err error) {
	for range count {
		if get {
			err = t.Get(src[:size], dst)
		} else {
			err = t.Put(src[:size], dst)
		}
		if err != nil {
			return 0, 0, errors.Join(err, t.Reset())
		}
	}
	return runTimed(ctx, t)
}

// runTimed starts t and waits for it, timed, and returns the MB/s of its bytes and the
// fraction of that time the calling thread was on a CPU: by copy (pools of segments over
// shared memory) Start does the copies itself, so below 1 the machine's other processes held
// the CPU; by UCX, the thread waits for the progress goroutine. t is reset for the next (a
// transfer reused keeps its memory: the rounds allocate nothing for the collector to run for).
func runTimed(ctx context.Context, t *remote.Transfer) (mbs, onCPU float64, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := t.Bytes()
	cpu0, start := threadCPU(), time.Now()
	if err := t.Start(); err != nil {
		return 0, 0, err
	}
	if err := t.Wait(ctx); err != nil {
		return 0, 0, err
	}
	wall, cpu := time.Since(start), threadCPU()-cpu0
	return float64(n) / wall.Seconds() / 1e6, cpu.Seconds() / wall.Seconds(), t.Reset()
}

// threadCPU returns the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// onCPU notes remote's rounds' fractions of time on a CPU (runTimed) in r.
func (r *ucxRow) onCPU(fs []float64) {
	r.Rounds.OnCPU = slices.Clone(fs)
	if len(fs) > 0 {
		if r.Detail != "" {
			r.Detail += "; "
		}
		r.Detail += fmt.Sprintf("remote's thread on a CPU %s%% of its rounds' time", spread(scale(fs, 100), 0))
	}
}

func scale(xs []float64, k float64) []float64 {
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = x * k
	}
	return ys
}

// opsFor is the number of operations of size bytes in one measurement: 64 MiB's worth, 16 to
// 16384.
func opsFor(size int) int { return min(16384, max(16, (64<<20)/size)) }

// bandwidth measures the puts and gets of size bytes that -cases selects (bandwidthRows).
// The buffers, here and the peer's, are freed whatever happens: a step that failed leaves none
// behind for the next.
func (b *ucxBenchState) bandwidth(ctx context.Context, size int) (rows []ucxRow, err error) {
	var dirs []bool
	for _, get := range []bool{false, true} {
		if b.filter.MatchString(opName(get) + "/" + sizeName(int64(size))) {
			dirs = append(dirs, get)
		}
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	src, err := b.pool.Alloc(size)
	if err != nil {
		return nil, err
	}
	defer func() {
		ctx, cancel := cleanupCtx(ctx)
		defer cancel()
		_, errC := b.call(ctx, b.c, "free")
		_, errR := b.call(ctx, b.cr, "free")
		if errors.Is(errC, errPeerLost) && errors.Is(err, errPeerLost) {
			errC, errR = nil, nil // said once
		}
		if err = errors.Join(err, errC, errR, b.pool.Free(src)); err != nil {
			rows = nil
		}
	}()
	return b.bandwidthRows(ctx, size, dirs, src)
}

// bandwidthRows measures the puts and gets (dirs) of size bytes from or into src, a row each.
func (b *ucxBenchState) bandwidthRows(ctx context.Context, size int, dirs []bool, src []byte) (
	[]ucxRow, error) {
	var rows []ucxRow
	dst, err := b.peerAlloc(ctx, b.c, size, 1)
	if err != nil {
		return nil, err
	}
	dstR, err := b.peerAlloc(ctx, b.cr, size, 1)
	if err != nil {
		return nil, err
	}
	t, tr := b.c.NewTransfer(), b.cr.NewTransfer()
	for _, get := range dirs {
		// A warm-up, untimed, as perftest's (-w, a tenth of the operations): the first
		// touch of the peer's new buffer here (over shared memory between pools of
		// segments, a page fault per page of its mapping in this process) is not the
		// transfer's.
		for _, w := range []struct {
			t *remote.Transfer
			d remote.Descriptor
		}{{t, dst[0]}, {tr, dstR[0]}} {
			if _, _, err := transferMBs(ctx, w.t, get, src, w.d, size, max(10, opsFor(size)/10)); err != nil {
				return nil, err
			}
		}
		var ours, rma, pt, like, cpu []float64
		for range b.rounds {
			v, f, err := transferMBs(ctx, t, get, src, dst[0], size, opsFor(size))
			if err != nil {
				return nil, err
			}
			ours, cpu = append(ours, v), append(cpu, f)
			if v, _, err = transferMBs(ctx, tr, get, src, dstR[0], size, opsFor(size)); err != nil {
				return nil, err
			}
			rma = append(rma, v)
			if b.perftest != "" {
				for _, l := range []bool{false, true} {
					v, err := b.runPerftest(ctx, get, l, size, opsFor(size))
					if err != nil {
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
		r := ucxRow{Case: opName(get) + "/" + sizeName(int64(size)), Size: size}
		r.compare(ours, rma, pt)
		r.like(ours, like)
		r.onCPU(cpu)
		fmt.Fprintf(os.Stderr, "  %-10s remote %s MB/s (on a CPU %s%%), ModeRMA %s, ucx_perftest %s (ratio %s), like remote %s (ratio %s)\n", r.Case,
			spread(ours, 0), spread(scale(cpu, 100), 0), spread(rma, 0), spread(pt, 0), spread(r.Rounds.Ratio, 2), spread(like, 0), spread(r.Rounds.LikeRatio, 2))
		rows = append(rows, r)
	}
	return rows, nil
}

func opName(get bool) string {
	if get {
		return "get"
	}
	return "put"
}

func printUCX(w io.Writer, tls, load string, rows []ucxRow) {
	fmt.Fprintf(w, "\n## UCX (%s), load %s\n\n", tls, load)
	fmt.Fprintln(w, "MB/s (µs for registration); medians of the rounds, the rounds' ratios min–max in brackets.")
	fmt.Fprintln(w, "perftest: ucx_perftest as it runs by default; like remote: with failure handling (-e), or over shared memory in ordinary memory.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | remote | remote, ModeRMA | perftest / other | remote ÷ it | perftest like remote | remote ÷ it | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | failed: %s | | | | | | |\n", r.Case, r.Error)
			continue
		}
		like, likeR := "", ""
		if r.Like > 0 {
			like, likeR = fmt.Sprintf("%.0f", r.Like), fmt.Sprintf("%.2f [%s]", r.LikeR, spread(r.Rounds.LikeRatio, 2))
		}
		// A competitor with no figure (ucx_perftest not installed) is no ratio of 0.
		other, ratio := "not measured", ""
		if r.Other > 0 && r.Ratio > 0 {
			other, ratio = fmt.Sprintf("%.0f", r.Other), fmt.Sprintf("%.2f [%s]", r.Ratio, spread(r.Rounds.Ratio, 2))
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s | %s |\n", r.Case, r.Remote, r.RMA, other, ratio, like, likeR, r.Detail)
	}
}
