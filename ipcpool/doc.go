// Package ipcpool is a pinned pool shared by the processes of a host: one process, the owner,
// makes a pool of locked memory and serves it on a Unix socket; others attach and map it.
// Every process then has a pinned.Pool of its own over that memory — per-P shards, Free from
// any goroutine, FreeAsync and RecordStream, Quota, ZeroOnFree, Stats, Usage, the metrics
// and the debug page, unchanged — and passes buffers to the others by Handle.
//
//	// The owner.
//	w, err := ipcpool.Serve("/run/kv/pool.sock", ipcpool.Options{Size: 1 << 30})
//	b, err := w.Alloc(4096)
//	h, err := w.Handle(b) // a small value: send it to another process any way you like
//
//	// Another process.
//	p, err := ipcpool.Attach(ctx, "/run/kv/pool.sock", ipcpool.AttachOptions{})
//	defer p.Close()
//	buf, err := p.Bytes(h)  // the same bytes, mapped here
//	err = p.Retain(h)       // keep it while this process reads it, whoever frees it
//	err = p.FreeHandle(h)   // or p.Free(buf): the buffer goes back to its holder
//
// The cross-process part is a source of memory for each process's pool and a control plane,
// not a second allocator. The pool is cut into grants; each process's arena asks the owner
// for grants as it needs memory (one socket round trip per grant, rare) and gives a grant
// back once it has stayed empty for the purge delay, so memory follows what each process
// holds. The owner asks processes for their empty grants when another needs memory. A Handle
// names one allocation: its entry in the control region's export table and a generation, so
// a handle of a buffer let go is refused (ErrStaleHandle), every time, and never names the
// buffer allocated in its place. A buffer is let go when its allocation (a Free in its
// holder, or a FreeHandle anywhere) and every Retain are; its holder takes it back through a
// ring from the process that let it go last, never waiting on a peer.
//
// A process that dies loses nothing of the others': its retains are let go, its buffers
// others retain live on, and its grants come back once it has exited (and, where a process
// has a CUDA device, once every such process has synchronized past a fence). Everything read
// from the socket or from the control region is checked before it is used: a peer that
// writes garbage is cut off, and crashes no other process nor makes it touch memory it does
// not hold.
//
// The Locked backend (the default) needs no CUDA: memfds mapped shared and locked with mlock
// (FallbackPageable keeps going, pageable, where the memlock limit refuses). With
// Options.Pool.Backend CUDAHost each process registers the regions with its CUDA context;
// Options.VMM makes the pool of exportable CUDA host granules instead. docs/ipcpool.md
// describes the model.
package ipcpool
