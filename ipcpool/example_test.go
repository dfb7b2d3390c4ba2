package ipcpool_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

// Example serves a pool and attaches to it; the attached side stands in for another process,
// which would call Attach with the same path and receive the handle over any channel. The
// pool is small and falls back to pageable memory, so it runs under an 8 MiB memlock limit.
func Example() {
	dir, err := os.MkdirTemp("", "ipcpool-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pool.sock")

	owner, err := ipcpool.Serve(path, ipcpool.Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	b, err := owner.Alloc(16) // the owner's pinned.Pool
	if err != nil {
		log.Fatal(err)
	}
	copy(b, "hello, neighbour")
	h, err := owner.Handle(b)
	if err != nil {
		log.Fatal(err)
	}

	p, err := ipcpool.Attach(context.Background(), path, ipcpool.AttachOptions{FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	buf, err := p.Bytes(h)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("slot %d reads %q from slot %d\n", p.Slot(), buf, owner.Slot())
	if err := p.FreeHandle(h); err != nil { // the buffer goes back to the owner
		log.Fatal(err)
	}
	if err := p.FreeHandle(h); errors.Is(err, ipcpool.ErrStaleHandle) {
		fmt.Println("a second FreeHandle is refused: stale")
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
	for owner.Stats().Live != 0 { // the owner takes it in within a drain interval
		time.Sleep(time.Millisecond)
	}
	fmt.Println("owner's live buffers:", owner.Stats().Live)
	if err := owner.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// slot 1 reads "hello, neighbour" from slot 0
	// a second FreeHandle is refused: stale
	// owner's live buffers: 0
}

// ExampleProcess_Retain shares one buffer with several readers: the buffer stays while any
// of them retains it, whoever frees its allocation.
func ExampleProcess_Retain() {
	dir, err := os.MkdirTemp("", "ipcpool-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pool.sock")
	owner, err := ipcpool.Serve(path, ipcpool.Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	prefix, _ := owner.Alloc(64)
	copy(prefix, "a shared KV prefix")
	h, _ := owner.Handle(prefix)

	reader, err := ipcpool.Attach(context.Background(), path, ipcpool.AttachOptions{FallbackPageable: true})
	if err != nil {
		log.Fatal(err)
	}
	if err := reader.Retain(h); err != nil {
		log.Fatal(err)
	}
	if err := owner.Free(prefix); err != nil { // the allocation goes; the retain keeps the buffer
		log.Fatal(err)
	}
	b, err := reader.Bytes(h)
	fmt.Printf("%q %v\n", b[:18], err)
	if err := reader.Release(h); err != nil { // the last reference: the buffer goes back
		log.Fatal(err)
	}
	_, err = reader.Bytes(h)
	fmt.Println(errors.Is(err, ipcpool.ErrStaleHandle))
	_ = reader.Close()
	for owner.Stats().Live != 0 {
		time.Sleep(time.Millisecond)
	}
	_ = owner.Close()
	// Output:
	// "a shared KV prefix" <nil>
	// true
}
