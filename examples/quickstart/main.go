// Quickstart allocates pinned (page-locked) buffers from a pinmalloc pool on the default
// backend, fills them, frees them and prints the pool's statistics.
//
//	go run ./examples/quickstart
package main

import (
	"fmt"
	"log"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

func main() {
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

	// Reuse is where a pool pays: a million alloc+free pairs, no system call among them once
	// the pool has memory for these sizes. The first round commits (and locks) it.
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
	// in the middle of the loop; Trim does it now.
	pool.Trim()
	churn(1000)
	start, before := time.Now(), pool.Stats().Syscalls
	const pairs = 1_000_000
	churn(pairs)
	el := time.Since(start)
	fmt.Printf("%d alloc+free pairs: %.1f ns/pair, %d system calls\n",
		pairs, float64(el.Nanoseconds())/pairs, pool.Stats().Syscalls-before)

	// Mistakes are errors, not crashes.
	b, _ := pool.Alloc(100)
	fmt.Println("free of a sub-slice:", pool.Free(b[10:]))
	fmt.Println("free:", pool.Free(b))
	fmt.Println("double free:", pool.Free(b))

	pool.Trim() // give free memory back now rather than after the purge delay
	st = pool.Stats()
	fmt.Printf("after Trim: %d KiB committed, %d KiB locked; %d allocs, %d frees\n",
		st.Committed>>10, st.Locked>>10, st.Allocs, st.Frees)
	if err := pool.Close(); err != nil {
		log.Fatal(err)
	}
}
