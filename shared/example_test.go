package shared_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/pinmalloc/pinmalloc/shared"
)

// Example serves a pool and attaches to it; the attached side stands in for another process,
// which would call Attach with the same path and receive the handle over any channel. The
// pool is small and falls back to pageable memory, so it runs under an 8 MiB memlock limit.
func Example() {
	dir, err := os.MkdirTemp("", "shared-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pool.sock")

	pool, err := shared.Serve(path, shared.Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	b, err := pool.Alloc(16)
	if err != nil {
		log.Fatal(err)
	}
	copy(b, "hello, neighbour")
	h, err := pool.Handle(b)
	if err != nil {
		log.Fatal(err)
	}

	p, err := shared.Attach(path, shared.AttachOptions{FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	buf, err := p.Bytes(h)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("slot %d reads %q from slot %d\n", p.Slot(), buf, pool.Slot())
	if err := p.FreeHandle(h); err != nil { // the owner takes the free in
		log.Fatal(err)
	}
	if err := p.Detach(); err != nil {
		log.Fatal(err)
	}
	pool.Collect()
	fmt.Println("owner's live buffers:", pool.Stats().Heap.Live)
	if err := pool.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// slot 1 reads "hello, neighbour" from slot 0
	// owner's live buffers: 0
}
