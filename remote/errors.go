package remote

import (
	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors. Every error of this package wraps one of them, and UCX's status where UCX
// refused a call (errors.Is(err, pinmalloc.ErrRefused) holds for a peer that is gone).
var (
	// ErrNoUCX means the UCX library could not be loaded (libucp.so.0 absent, too old, or a
	// build without cgo; install Debian's libucx0), or refused the configuration the
	// environment gives it (UCX_TLS naming no transport it has, tcp's receive segments
	// smaller than its send segments, ...); the error says why.
	ErrNoUCX = errkind.New(pinmalloc.ErrNoUCX, "remote: UCX cannot be used")
	// ErrClosed means the worker, connection, listener or registration was closed.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "remote: closed")
	// ErrDescriptor means a descriptor that cannot be used: truncated or corrupted bytes, an
	// unknown version, a buffer outside its region, a region that contradicts what an earlier
	// descriptor said of it, a remote key UCX refuses, or a descriptor of a worker other than
	// the connection's peer.
	ErrDescriptor = errkind.New(pinmalloc.ErrInvalid, "remote: bad descriptor")
	// ErrOutOfRange means a length beyond the buffer a descriptor names (or a slice of one
	// outside it), or a zero length.
	ErrOutOfRange = errkind.New(pinmalloc.ErrInvalid, "remote: out of range")
	// ErrNotRegistered means local memory that is not a buffer of a pool or heap registered
	// with the worker.
	ErrNotRegistered = errkind.New(pinmalloc.ErrNotOwned, "remote: memory not registered")
	// ErrPeer means the peer failed: it died, reset the connection, could not be reached, or
	// refused; the error wraps UCX's status.
	ErrPeer = errkind.New(pinmalloc.ErrRefused, "remote: peer failed")
	// ErrBusy means the call would disturb transfers in flight (a Transfer reused before it
	// completed, a registration closed under one).
	ErrBusy = errkind.New(pinmalloc.ErrBusy, "remote: transfers in flight")
	// ErrNotSupported means memory this UCX cannot reach: device memory where the library was
	// built without CUDA transports.
	ErrNotSupported = errkind.New(pinmalloc.ErrInvalid, "remote: not supported by this UCX")
	// ErrTooLarge means a message beyond Options.MaxMessage.
	ErrTooLarge = errkind.New(pinmalloc.ErrTooLarge, "remote: message too large")
	// ErrProtocol means a peer that spoke something other than this package's handshake.
	ErrProtocol = errkind.New(pinmalloc.ErrRefused, "remote: protocol error")
	// ErrUCX means UCX refused a call of this worker for a reason of its own, no peer's (out of
	// memory or resources, an internal error); the error wraps UCX's status.
	ErrUCX = errkind.New(pinmalloc.ErrRefused, "remote: UCX refused")
)
