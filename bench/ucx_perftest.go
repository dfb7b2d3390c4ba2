package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// The UCX suite's competitor (ucx.go): UCX's own ucx_perftest, server and client, on this host.

// perftestFinal matches the client's final line: iterations, latency (median, average,
// overall), bandwidth (average, overall), message rate (average, overall). A round whose
// last report came at once prints its averages as inf (and 0): only the overall figure is read.
var perftestFinal = regexp.MustCompile(`^\s*(\d+)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+)\s+(\d+)\s+(\d+)\s*$`)

// runPerftest runs ucx_perftest's server and client on this host with the same UCX
// environment (less, unless like, the variables remote's loader set: ucx.SetByLoad) and returns the client's overall bandwidth in MB/s (10^6 bytes): ucp_put_bw, or
// ucp_get with 64 outstanding. With like, it runs as remote does: over shared memory
// (PINMALLOC_BENCH_SHM) in ordinary memory (UCX_ALLOC_PRIO=mmap: perftest's buffers are then
// memory UCX registers, not a segment it allocates for the peer to map, as a pool's regions
// are), elsewhere with failure handling (-e, as remote's connections have it).
// Both end when ctx does.
func (b *ucxBenchState) runPerftest(ctx context.Context, get, like bool, size, iters int) (
	float64, error) {
	port := 20000 + os.Getpid()%20000
	env := os.Environ()
	if !like { // as UCX runs by default: without what remote's loader set (ucx.SetByLoad)
		env = slices.DeleteFunc(env, func(kv string) bool { return slices.Contains(ucx.SetByLoad(), kv) })
	}
	var extra []string
	if like && os.Getenv("PINMALLOC_BENCH_SHM") != "" {
		env = append(env, "UCX_ALLOC_PRIO=mmap")
	} else if like {
		extra = []string{"-e"}
	}
	srv := exec.CommandContext(ctx, b.perftest, append([]string{"-p", fmt.Sprint(port)}, extra...)...)
	srv.Env = env
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
	args = append(args, extra...)
	var out []byte
	var err error
	for try := 0; try < 50 && ctx.Err() == nil; try++ { // the server needs a moment to listen
		cmd := exec.CommandContext(ctx, b.perftest, args...)
		cmd.Env = env
		out, err = cmd.CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || out == nil {
		if ctx.Err() != nil { // the client killed, or never started, as ctx ended
			err = ctx.Err()
		}
		return 0, fmt.Errorf("ucx_perftest %s: %w: %s", strings.Join(args, " "), err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if m := perftestFinal.FindStringSubmatch(l); m != nil {
			mib, _ := strconv.ParseFloat(m[6], 64) // overall bandwidth, MiB/s
			return mib * (1 << 20) / 1e6, nil
		}
	}
	return 0, fmt.Errorf("no result in ucx_perftest's output: %s", out)
}
