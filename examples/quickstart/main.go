// Quickstart allocates pinned (page-locked) buffers from a pinmalloc pool on the default
// backend, fills them, frees them and prints the pool's statistics.
//
//	go run ./examples/quickstart
package main

import (
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: quickstart\n\n"+
			"Allocates, fills and frees pinned buffers on the default backend (mmap+mlock; about\n"+
			"5 MiB locked, within an ordinary user's 8 MiB ulimit -l) and prints the pool's figures.\n")
	}
	flag.Parse()

	// The zero Options: locked host memory (mmap + mlock), 64-byte alignment, capacity =
	// physical memory (address space only; memory is committed and locked as it is used).
	pool, err := pinned.New(pinned.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// A few staging buffers of the sizes a GPU program moves around: about 5 MiB locked in all,
	// under the 8 MiB RLIMIT_MEMLOCK that Debian and Ubuntu give an ordinary user.
	sizes := []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}
	var bufs [][]byte
	for _, n := range sizes {
		b, err := pool.Alloc(n)
		if err != nil {
			// Under a small RLIMIT_MEMLOCK this says which limit and how to raise it.
			log.Fatal(err)
		}
		for i := range b {
			b[i] = byte(i)
		}
		bufs = append(bufs, b)
	}
	st := pool.Stats()
	fmt.Printf("backend %s (%s): %d buffers live, %d KiB in use, %d KiB committed, %d KiB locked, alignment waste %d B\n",
		st.Backend, st.Kind, st.Live, st.InUse>>10, st.Committed>>10, st.Locked>>10, st.AlignWaste)

	for _, b := range bufs {
		if err := pool.Free(b); err != nil {
			log.Fatal(err)
		}
	}

	// Reuse is where a pool pays: alloc+free pairs of sizes the pool has pages for make no
	// system call. Each round counts every system call the pool made while it ran. The pool
	// keeps one heap per P (up to GOMAXPROCS), so a goroutine that the scheduler moves to
	// another P meets a heap that commits and locks its pages once (mprotect + mlock: 2 calls
	// per 32 KiB slice), and the purge timer gives back pages idle for 10-15 ms; that is what
	// a count above 0 is. Memory stops growing after the first rounds.
	churn := func(pairs int) {
		for i := range pairs {
			b, err := pool.Alloc(64 << (i % 8)) // 64 B ... 8 KiB
			if err != nil {
				log.Fatal(err)
			}
			if err := pool.Free(b); err != nil {
				log.Fatal(err)
			}
		}
	}
	// The freed staging buffers would be decommitted (and unlocked) after the purge delay,
	// in the middle of a round; Trim does it now.
	if err := pool.Trim(); err != nil {
		log.Fatal(err)
	}
	const pairs = 1_000_000
	for round := 1; round <= 3; round++ {
		start, before := time.Now(), pool.Stats().Syscalls
		churn(pairs)
		el := time.Since(start)
		st := pool.Stats()
		fmt.Printf("round %d: %d alloc+free pairs, %.1f ns/pair, %d system calls (heaps in use: %d)\n",
			round, pairs, float64(el.Nanoseconds())/pairs, st.Syscalls-before, st.Shards)
	}
	fmt.Println("  (a system call here commits a heap's 32 KiB slice, mprotect+mlock, the first time the heap\n" +
		"   needs a page of that size, or gives back a page idle past the purge delay)")

	// Mistakes are errors, not crashes.
	b, err := pool.Alloc(100)
	if err != nil {
		log.Fatal(err) // ignored, a failed Alloc leaves b nil, and b[10:] below panics
	}
	fmt.Println("free of a sub-slice:", pool.Free(b[10:]))
	fmt.Println("free:", pool.Free(b))
	fmt.Println("double free:", pool.Free(b))

	if err := pool.Trim(); err != nil { // give free memory back now rather than after the purge delay
		log.Fatal(err)
	}
	st = pool.Stats()
	fmt.Printf("after Trim: %d KiB committed, %d KiB locked; %d allocs, %d frees\n",
		st.Committed>>10, st.Locked>>10, st.Allocs, st.Frees)
	if err := pool.Close(); err != nil {
		log.Fatal(err)
	}
}
