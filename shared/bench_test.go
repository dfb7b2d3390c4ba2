package shared

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// benchPool serves a pool of 16 MiB (pageable where the memlock limit refuses) and attaches
// to it in this process; both go at the benchmark's end.
func benchPool(b *testing.B) (*Owner, *Process) {
	path := filepath.Join(b.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: 16 << 20})
	if err != nil {
		b.Skip(err)
	}
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		w.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.Detach()
		w.Close()
	})
	return w, p
}

// BenchmarkAllocFreePair compares an alloc+free pair in the owner and in an attached process
// of the same pool (attached in this process: the same code over a mapping of its own, as in
// another process). Run both with -count to interleave them.
func BenchmarkAllocFreePair(b *testing.B) {
	w, p := benchPool(b)
	for _, c := range []struct {
		name string
		p    *Process
	}{{"owner", w.Process}, {"attached", p}} {
		for _, n := range []int{64, 4096} {
			b.Run(c.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					buf, err := c.p.Alloc(n)
					if err != nil {
						b.Fatal(err)
					}
					if err := c.p.Free(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAllocFreeRatio times alloc+free pairs of 64 B in the owner and in an attached
// process in alternating batches of 1000, so that both sides see the same load, and reports
// each side's ns per pair and their ratio (attached / owner; the target is at most 1.2).
func BenchmarkAllocFreeRatio(b *testing.B) {
	w, p := benchPool(b)
	const batch = 1000
	var took [2]time.Duration
	for i := 0; i < b.N; i++ {
		for side, q := range []*Process{w.Process, p} {
			start := time.Now()
			for j := 0; j < batch; j++ {
				buf, err := q.Alloc(64)
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
	n := float64(b.N * batch)
	b.ReportMetric(float64(took[0].Nanoseconds())/n, "owner-ns/pair")
	b.ReportMetric(float64(took[1].Nanoseconds())/n, "attached-ns/pair")
	b.ReportMetric(float64(took[1])/float64(took[0]), "attached/owner")
}

// BenchmarkAttach measures attaching to (and detaching from) a pool of
// PINMALLOC_SHARED_ATTACH_MIB MiB (default 64; 1024 for the 1 GiB figure, which needs a
// memlock limit of 1 GiB or CAP_IPC_LOCK for the owner). The owner locks the pool once,
// outside the timing.
func BenchmarkAttach(b *testing.B) {
	mib := 64
	if s := os.Getenv("PINMALLOC_SHARED_ATTACH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	path := filepath.Join(b.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: uintptr(mib) << 20})
	if errors.Is(err, ErrMemlock) {
		b.Skipf("memlock limit: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.Run(strconv.Itoa(mib)+"MiB", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StartTimer()
			p, err := Attach(path, AttachOptions{FallbackPageable: true})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Detach(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
