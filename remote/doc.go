// Package remote moves pool buffers between processes and hosts with UCX (openucx): every
// region of a pinned.Pool (or device.Heap) is registered with the network once, when the pool
// maps it, so every buffer the pool hands out can be read and written by a peer with one-sided
// puts and gets, at no registration cost per buffer.
//
// # Use
//
//	w, err := remote.New(remote.Options{})   // errors.Is(err, remote.ErrNoUCX) without libucp
//	reg, err := w.Register(pool)              // the pool's regions, now and as it grows
//	l, err := w.Listen("0.0.0.0:13337")       // one side listens...
//	c, err := l.Accept(ctx)
//	d, err := reg.Describe(buf)               // buf's descriptor: send it to the peer
//	err = c.Send(ctx, d.AppendBinary(nil))
//
//	c, err := w.Connect(ctx, "decode:13337")  // ...the other connects
//	m, err := c.Recv(ctx)
//	d, _, err := remote.ParseDescriptor(m)
//	t := c.NewTransfer()                      // a batch: KV blocks of a request
//	err = t.Put(block, d)                     // block: a buffer of a registered pool
//	err = t.Start()
//	err = t.Wait(ctx)                         // or select on t.Done()
//
// Worker addresses (Address, Dial, and Accept on the dialed side) serve programs that have a
// control plane of their own.
//
// Between processes of one host over shared memory (Options.SharedMemory, UCX_TLS=sm), a pool
// whose regions UCX allocates (pinned.Options.Source: Worker.SegmentSource) is reached by its
// peers with one copy per put or get, at memcpy speed, where a pool of ordinary memory is
// reached by messages.
//
// # Design
//
// UCX is loaded at run time (internal/ucx: dlopen of libucp.so.0, no header at build, each
// entry point resolved when first used), so a program builds without UCX and reports ErrNoUCX
// where it is missing, as package cuda reports a missing driver.
//
// A Registration is an arena.RegionObserver of the pool's arena: ucp_mem_map when a region is
// mapped, its remote key packed then, ucp_mem_unmap before the region is given back. A
// Descriptor carries the region's key, its range and the buffer's, and the id of the worker
// that registered it; a connection checks every descriptor against its peer's id and, per
// region, against the first descriptor it saw (a forged or stale one is refused before
// anything is posted), and every length against the buffer named, so this process never asks a
// peer to write outside the buffer a descriptor names. A worker tells its connections' peers of
// each region it deregisters, and they forget it: a connection's bound on the regions it knows
// counts those live at its peer.
//
// Where a peer's region is a SysV segment UCX allocated and this process maps it (its key
// unpacked, ucp_rkey_ptr), a put or get is a copy made by Start, once the kernel's mappings
// and the segment's record have shown, before the first copy, that the region lies inside a
// segment the peer made: UCX itself checks no range there (docs/ucx.md).
//
// A Transfer posts its puts and gets in one cgo call, each with the registration of its local
// region, and ends with a flush of the endpoint when it has puts, so that its completion means
// the bytes are in the peer's memory. Completions are queued by C callbacks inside UCX and
// handed over in one cgo call per progress round: no call into Go per operation. One goroutine
// per worker progresses UCX; idle, it sleeps on the worker's event fd through the Go runtime's
// poller (ucp_worker_arm), so an idle worker costs nothing.
//
// Ownership follows the pool's rules. A local buffer is held in its pool (pinned.Pool.Hold) from
// Put or Get until its transfer ends (or, on a connection abandoned, or failed with
// SharedMemory, with the operation still in UCX's hands, until UCX lets go of it: Transfer): a Free meanwhile takes effect then, so memory
// in flight is never handed out again, and its region, which holds a live buffer, is never
// deregistered under it. In a CUDAHost pool, a transfer waits for the CUDA streams recorded on its
// buffers (RecordStream, device.Heap's async copies) before it reads or writes them, and a buffer
// used by both that is freed goes back only once the streams and the transfer have passed it. The
// side a peer reads or writes waits for no stream: its owner makes a buffer ready
// (pinned.Pool.WaitStreams) before it hands out the buffer's descriptor, and reads what a peer put
// there once the peer says it is done. The target of a put by message holds the buffer it lands in
// until its bytes are copied, and that of a get the buffer it answers from until UCX has sent the
// answer, so that a free meanwhile, or a peer that stops reading, cannot make the copy or UCX
// touch memory given back; Options.AnswerTimeout bounds how long such a peer keeps them held,
// failing its connection.
//
// # Peers
//
// Connections are made with UCX's peer failure handling: a peer that dies (SIGKILL, a reset)
// fails the connection, and every transfer in flight on it ends with an error wrapping ErrPeer.
// What UCX cannot give is protection from a hostile peer: with transports that emulate puts and
// gets in software (TCP, and shared memory without a zero-copy path) a peer's write lands at the
// address it names, checked by nothing but that peer's UCX; only RDMA hardware checks a remote
// key's range. So connect workers that trust each other, as with any RDMA fabric. docs/ucx.md
// has the transports, the knobs (UCX_TLS, UCX_NET_DEVICES) and what this machine can show.
//
// A dialer's identity is its own word. Dial's hello carries the dialer's worker address, and
// the dialed worker connects to it (a new UCX endpoint: ucp_ep_create), answers there, and
// hands that connection to Accept: a dialer that names another worker's address makes the
// dialed worker open a UCX connection to it (its transports' sockets: a TCP connect to any
// host and port the address holds) and Accept return a connection to that worker, under the
// worker id, pid and host the hello claims. That worker drops what comes on it (no connection
// of its own has the id), unless it colludes. UCX 1.13 cannot be asked whom the endpoint a
// hello came on leads to; its endpoint matching does make ucp_ep_create return that very
// endpoint for the dialer's own address, but only while both workers have created as many
// endpoints to each other (a dial whose hello was never answered puts them out of step for
// good), so requiring it refused honest dials. A Listener's client is not asked for an
// address: its connection is the endpoint it connected on. Two workers that Dial each other at
// once (symmetric peers at start-up) make one endpoint pair, UCX's matching pairing their two
// endpoints: each hello comes on the other's Dial's endpoint, and each Dial takes the other's
// hello as its answer, so both return the two ends of one connection, which no Accept returns.
// A hello on a connection's endpoint opens nothing else: a peer makes no more connections so.
//
// So are the pid and host id of a hello or its acknowledgement the peer's word, which nothing
// here can check: no authorization, accounting or lookup depends on them (a connection is
// found by its random id, the peer's descriptors by its worker id), and they serve, with
// SharedMemory only, to watch the peer's process (a peer that names another's has its own
// connection abandoned when that process exits, or its own death unseen) and, for puts and
// gets by copy, as the process whose SysV segments a descriptor may name (docs/ucx.md). There a
// lie lets a peer that reaches this worker's shared memory have its copies read and write a
// segment another process of this user made, as UCX's own shared-memory transports do for any
// key, unchecked; but only one that this process's group may read and write (UCX's are 0660,
// the creator's group), of this process's group: with UCX 1.13, the segments a peer able to
// connect over sm (which attaches this worker's SysV segments, 0660, or its posix files, 0600)
// could attach by itself; older releases made their posix files 0666 less the umask
// (docs/ucx.md). A segment of this user that the group may not attach goes by message.
// A challenge in the handshake (the peer makes a segment under a key this worker chose, whose
// creator the kernel records) would not prove the pid: a peer that reaches the process it
// names, a worker of this package, hands that worker the key in a handshake of its own and
// passes its answer on. Only an endpoint bound to its process would, and UCX 1.13 cannot say
// whom an endpoint leads to: connect with SharedMemory only workers that trust each other.
//
// # Locking
//
// The worker's mutex guards every UCX call and the worker's state; a pool's arena calls a
// Registration with its own lock held, and the worker never holds its mutex while it calls a
// pool (a transfer's holds are released after the mutex is let go; the progress goroutine holds
// the buffers of its answers to peers' gets, and releases them, with it let go). Lock order: a
// pool's arena, then the worker. A transfer's copies into and out of a peer's segments run with
// the mutex let go, the connection's keys (which keep the segments mapped) kept until they end.
package remote
