package shared

import (
	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinels of package shared. Those of a shared kind match it under errors.Is as well.
var (
	// ErrStaleHandle: the handle's memory changed owner since the handle was made (its
	// owner process detached or died and its chunks were taken back). Kind ErrNotOwned.
	ErrStaleHandle = errkind.New(pinmalloc.ErrNotOwned, "shared: stale handle (its memory changed owner)")
	// ErrForeignHandle: the handle, or the buffer, is not of this pool (another pool's id, a
	// region or range outside the pool). Kind ErrNotOwned.
	ErrForeignHandle = errkind.New(pinmalloc.ErrNotOwned, "shared: handle or buffer not of this pool")
	// ErrClosed: the process detached, or the owner closed the pool. Kind ErrClosed.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "shared: pool closed or detached")
	// ErrAttached: the owner's Close found processes still attached; nothing was released.
	// Kind ErrLiveBlocks.
	ErrAttached = errkind.New(pinmalloc.ErrLiveBlocks, "shared: processes still attached")
	// ErrPoolFull: no chunk of the shared pool is free, or no process slot. Kind
	// ErrOutOfMemory.
	ErrPoolFull = errkind.New(pinmalloc.ErrOutOfMemory, "shared: pool full")
	// ErrInvalidOptions: options that cannot work. Kind ErrInvalid.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "shared: invalid options")
	// ErrMemlock: the memlock limit refused to lock the pool's memory. Kind ErrMemlock.
	ErrMemlock = errkind.New(pinmalloc.ErrMemlock, "shared: memlock limit reached (raise ulimit -l, LimitMEMLOCK, or grant CAP_IPC_LOCK)")
	// ErrRefused: the owner refused the attaching process (its peer credentials are not
	// allowed) or the attaching side found no pool at the socket.
	ErrRefused = errkind.New(pinmalloc.ErrRefused, "shared: attach refused")
	// ErrProtocol: the socket carried something that is not this package's protocol (a
	// version mismatch, a truncated message).
	ErrProtocol = errkind.New(pinmalloc.ErrInvalid, "shared: protocol error")
)
