package ipcpool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// The performance targets, each measured side by side in one run where there is something to
// compare with:
//
//	BenchmarkPairRatio     an attached process's alloc+free pair / a plain pinned.Pool's (≤ 1.1)
//	BenchmarkRemoteFree    a free of another process's buffer, by handle and by address (≤ 200 ns)
//	BenchmarkAttach        Attach + Close of a pool of PINMALLOC_IPCPOOL_MIB MiB (1 GiB: ≤ 1 ms)
//	BenchmarkOwnerRestart  an owner's Serve adopting a pool of PINMALLOC_IPCPOOL_MIB MiB that a
//	                       keeper holds (1 GiB: ≤ 10 ms), the bytes locked anew and the faults
//
// The attached process runs in the benchmark's process: the same code over a mapping of its
// own, as in another process.

// benchMiB is the pool size of BenchmarkAttach and BenchmarkOwnerRestart.
func benchMiB() int {
	if s := os.Getenv("PINMALLOC_IPCPOOL_MIB"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 64
}

// benchPool serves a pool of 32 MiB and attaches to it in this process; both go at the
// benchmark's end.
func benchPool(b *testing.B) (*Owner, *Process) {
	path := filepath.Join(b.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: 32 << 20, GrantSize: 2 << 20})
	if err != nil {
		b.Fatal(err)
	}
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	if err != nil {
		w.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.Close()
		w.Close()
	})
	return w, p
}

// BenchmarkPairRatio times alloc+free pairs in a plain pinned.Pool and in an attached process
// in alternating batches of 1000, so that both see the same load, and reports each side's ns
// per pair and their ratio (attached / plain; the target is at most 1.1).
func BenchmarkPairRatio(b *testing.B) {
	_, p := benchPool(b)
	plain, err := pinned.New(pinned.Options{Capacity: 32 << 20, Backend: pinned.Pageable})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	for _, n := range []int{64, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			const batch = 1000
			var took [2]time.Duration
			for i := 0; i < b.N; i++ {
				for side, q := range []*pinned.Pool{plain, p.Pool} {
					start := time.Now()
					for j := 0; j < batch; j++ {
						buf, err := q.Alloc(n)
						if err != nil {
							b.Fatal(err)
						}
						if err := q.Free(buf); err != nil {
							b.Fatal(err)
						}
					}
					took[side] += time.Since(start)
				}
			}
			pairs := float64(b.N * batch)
			b.ReportMetric(float64(took[0].Nanoseconds())/pairs, "plain-ns/pair")
			b.ReportMetric(float64(took[1].Nanoseconds())/pairs, "attached-ns/pair")
			b.ReportMetric(float64(took[1])/float64(took[0]), "attached/plain")
		})
	}
}

// BenchmarkRemoteFree times the free of a buffer another process (the owner) shared: by its
// handle (FreeHandle) and by address (the pool's Free of the slice Bytes gave). The owner
// allocates and shares the buffers, and takes them back, outside the timing.
func BenchmarkRemoteFree(b *testing.B) {
	w, p := benchPool(b)
	const batch = 256
	for _, how := range []string{"handle", "address"} {
		b.Run(how, func(b *testing.B) {
			hs := make([]Handle, batch)
			bufs := make([][]byte, batch)
			var took time.Duration
			for done := 0; done < b.N; done += batch {
				n := min(batch, b.N-done)
				for i := range n {
					x, err := w.Alloc(64)
					if err != nil {
						b.Fatal(err)
					}
					if hs[i], err = w.Handle(x); err != nil {
						b.Fatal(err)
					}
					if bufs[i], err = p.Bytes(hs[i]); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				for i := range n {
					var err error
					if how == "handle" {
						err = p.FreeHandle(hs[i])
					} else {
						err = p.Free(bufs[i])
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				took += time.Since(start)
				w.Collect()
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "ns/free")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkAttach measures Attach and Close of a pool of PINMALLOC_IPCPOOL_MIB MiB (default
// 64; 1024 for the 1 GiB figure, which needs a memlock limit of 1 GiB or CAP_IPC_LOCK). The
// owner locks the pool once, outside the timing; Close is timed apart.
func BenchmarkAttach(b *testing.B) {
	mib := benchMiB()
	path := filepath.Join(b.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: mib << 20})
	if errors.Is(err, ErrMemlock) {
		b.Fatalf("%v: run as root, or with a memlock limit of %d MiB", err, mib)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var attach, close time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		p, err := Attach(context.Background(), path, AttachOptions{})
		attach += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		close += time.Since(start)
	}
	b.ReportMetric(float64(attach.Microseconds())/float64(b.N), "µs/attach")
	b.ReportMetric(float64(close.Microseconds())/float64(b.N), "µs/close")
	b.ReportMetric(float64(mib), "MiB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkOwnerRestart kills the owner of a pool of PINMALLOC_IPCPOOL_MIB MiB (default 64;
// 1024 for the 1 GiB figure) that a keeper holds, and times the next owner's Serve as it
// adopts the pool (measured inside that process), with the bytes the system locks anew meanwhile
// (Mlocked of /proc/meminfo: the machine's, so other work on it shows too) and the minor
// faults of the new owner's Serve. The new owner has used pinmalloc once before it serves, as a
// program that restarts does (PINMALLOC_IPCPOOL_COLD=1 times it cold: its first pool then
// pays the process's membarrier registration too).
func BenchmarkOwnerRestart(b *testing.B) {
	mib := benchMiB()
	path := filepath.Join(b.TempDir(), "pool.sock")
	owner := startOwnerForBench(b, path, mib, false)
	keeper := startKeeperForBench(b, path)
	defer keeper.kill()
	var serve time.Duration
	var faults, repinned int64
	for i := 0; i < b.N; i++ {
		owner.kill()
		before := mlocked(b)
		owner = startOwnerForBench(b, path, mib, true)
		after := mlocked(b)
		serve += owner.serve
		faults += owner.faults
		repinned += max(after-before, 0)
	}
	owner.kill()
	b.ReportMetric(float64(serve.Microseconds())/1000/float64(b.N), "ms/restart")
	b.ReportMetric(float64(repinned)/float64(b.N), "repinned-B")
	b.ReportMetric(float64(faults)/float64(b.N), "minflt")
	b.ReportMetric(float64(mib), "MiB")
	b.ReportMetric(0, "ns/op")
}

// benchProc is a child of a benchmark: an owner, with what it measured of its Serve.
type benchProc struct {
	child
	serve  time.Duration
	faults int64
}

func startOwnerForBench(b *testing.B, path string, mib int, adopt bool) *benchProc {
	env := ownerEnv(path, mib<<20)
	if os.Getenv("PINMALLOC_IPCPOOL_COLD") != "" {
		env = append(env, ownerColdEnv+"=1")
	}
	if adopt {
		env = append(env, ownerAdoptEnv+"=1")
	}
	return startBenchProc(b, env)
}

func startKeeperForBench(b *testing.B, path string) *benchProc {
	return startBenchProc(b, append(os.Environ(), keeperChildEnv+"="+path))
}

func startBenchProc(b *testing.B, env []string) *benchProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchProc{child: child{cmd: cmd, in: in, out: bufio.NewScanner(out)}}
	b.Cleanup(p.kill)
	if !p.out.Scan() {
		b.Fatal("a benchmark's child did not start")
	}
	f := strings.Fields(p.out.Text())
	if len(f) < 2 || f[0] != "READY" {
		b.Fatalf("a benchmark's child: %q", p.out.Text())
	}
	if len(f) >= 4 {
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		p.serve = time.Duration(ns)
		p.faults, _ = strconv.ParseInt(f[3], 10, 64)
	}
	return p
}

func (p *benchProc) kill() {
	if !p.dead {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.dead = true
	}
}

// mlocked returns the machine's locked memory (Mlocked of /proc/meminfo) in bytes.
func mlocked(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var kb int64
		if n, _ := fmt.Sscanf(line, "Mlocked: %d kB", &kb); n == 1 {
			return kb << 10
		}
	}
	b.Fatal("no Mlocked in /proc/meminfo")
	return 0
}
