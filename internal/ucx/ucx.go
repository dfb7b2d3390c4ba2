// Package ucx is pinmalloc's binding to UCX (openucx), loaded at run time: the few entry points
// of libucp that package remote needs to register pool memory, connect workers and move bytes
// with puts and gets.
//
// # Design
//
// No UCX header is needed to build it. On linux with cgo, libucp.so.0 is opened with dlopen the
// first time it is needed (Load), and each entry point is resolved lazily, once, by dlsym; one
// the library lacks is an error naming it, reported by the call that needs it. UCX's own
// dependencies (libucs, libuct and its transport modules) come with libucp. The parameter
// structs are declared in ucxtypes.h with UCX's layout and filled in C by the shims of shim.c;
// layout_test.go checks them against the real headers where those are installed.
//
// Before the first dlopen, Load sets UCX_ERROR_SIGNALS to the empty string unless the
// environment sets it: UCX would otherwise install handlers of its own for SIGSEGV, SIGBUS,
// SIGILL and SIGFPE, which the Go runtime owns (a nil dereference must stay a Go panic). It
// sets UCX_TCP_TX_SEG_SIZE likewise ("Sends by copy").
//
// Without cgo, or off linux, the same API compiles and Load reports ErrNoUCX.
//
// # Sends by copy
//
// A data message with Op.Copy set, or SendMessage's with byCopy, goes with a datatype of this
// package's (ucp_dt_create_generic: pack is a memcpy from the slot's pm_packed), which UCX can
// send only by copying into its transport's buffers. Package remote asks for it on endpoints
// with a tcp lane: UCX's tcp transport (1.13 to its newest) calls a zero-copy send's completion
// twice when the socket fails while part of the send is still to go (uct_tcp_ep_sendv: once in
// the purge of the failed endpoint, once more with the send's error), and a UCX built with
// assertions, as Debian's and Ubuntu's are, aborts the process there ("uct_iface.h: Assertion
// `comp->count > 0' failed"): a peer dying while this process sends it a large message would
// end this process. No setting of UCX turns tcp's zero copy off alone (UCX_ZCOPY_THRESH is
// every transport's; UCX_TCP_MAX_IOV below 1 leaves no room for UCX's own short sends).
//
// Those copies go in tcp's send segments, 8 KiB by default: Load sets UCX_TCP_TX_SEG_SIZE to
// 64k, the size of tcp's receive segments, unless the environment sets it or
// UCX_TCP_RX_SEG_SIZE (a peer's receive segments must hold this process's send segments).
// On loopback that took gets by message from 0.3-0.6 GB/s to 1.2-1.8 (docs/ucx.md).
//
// # Threads and callbacks
//
// A Worker is created in UCS_THREAD_MODE_SERIALIZED: any OS thread may call it, one at a time,
// which the Go side ensures with the worker's mutex (goroutines move between threads). UCX
// calls back only from inside calls on the worker (ucp_worker_progress, mostly); the callbacks
// are C functions (shim.c) that queue what they are told in the worker's C state, and Progress
// and Events hand the queues to Go in one cgo call each, so no completion calls into Go.
//
// # Invariants
//
//   - Load and each symbol's resolution happen at most once per process.
//   - Every operation in flight owns one slot of its worker (Worker.Slots) until its completion
//     is returned by Progress; a slot's completion is queued once.
//   - Memory handed to UCX for an operation that completes later (a put's source, a get's
//     destination) is never Go memory: pool memory from mmap, or C memory for messages.
package ucx

// LibraryEnv names the environment variable that, when set and not empty, gives the path of
// the library Load opens instead of libucp.so.0. It is read once, by the first Load.
const LibraryEnv = "PINMALLOC_LIBUCP"

// apiMajor and apiMinor are the UCP API version this binding is written to: the nbx calls,
// active messages with a receive handler and ucp_conn_request_query are all there in 1.11.
const (
	apiMajor = 1
	apiMinor = 11
)

// EventBatch is the most events a caller should take from Events at a time; Progress stops
// calling ucp_worker_progress once the callbacks have queued that many. A caller that calls
// Progress only while Events has left nothing queued (it returned fewer than EventBatch) keeps
// the queue, which a peer's messages fill, under EventBatch and what one ucp_worker_progress
// receives, however fast the peer sends: the rest waits in UCX's transports (the sockets).
const EventBatch = 256

// Memory types (ucs_memory_type_t).
const (
	MemoryHost = 0
	MemoryCUDA = 1
)

// Status values of ucs_status_t this package tests for.
const (
	statusOK         = 0
	statusInProgress = 1
	statusNoDevice   = -14
	statusBusy       = -15
	statusCanceled   = -16
)
