// Package shared is pinned host memory shared across processes: one process, the owner,
// serves a pool of locked memory on a Unix socket; others attach and map it; every process
// allocates from it with a heap of its own and passes buffers to the others by Handle.
//
//	// The owner.
//	pool, err := shared.Serve("/run/kv/pool.sock", shared.Options{Size: 1 << 30})
//	b, err := pool.Alloc(4096)
//	h, err := pool.Handle(b) // a small value: send it to another process any way you like
//
//	// Another process.
//	p, err := shared.Attach("/run/kv/pool.sock", shared.AttachOptions{})
//	defer p.Detach()
//	buf, err := p.Bytes(h) // the same bytes, mapped here
//	err = p.FreeHandle(h)  // or p.Free(buf): it reaches the owner's heap, no round trip
//
// The Locked backend (the default) needs no CUDA: memfds mapped shared and locked with mlock
// (Options.FallbackPageable keeps going, pageable, where the memlock limit refuses). With
// Options.Device each process registers the regions with its CUDA context, so that copies run
// by DMA; the VMM backend uses exportable CUDA host granules instead.
//
// A process that dies loses nothing of the others' memory, and its own comes back to the
// pool: a handle whose memory changed owner is refused (ErrStaleHandle) rather than naming
// another owner's bytes. Frees of another process's buffers go through a ring to their owner
// (Process.Collect, or every DrainInterval). docs/shared.md describes the model: regions,
// grants, the control region, the rings and what happens when a process dies.
package shared
