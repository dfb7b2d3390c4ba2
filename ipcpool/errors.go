package ipcpool

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinels of package ipcpool. Each matches the module's kind it names under errors.Is as
// well. Errors that come from a process's pinned.Pool (Alloc, Free) are pinned's.
var (
	// ErrStaleHandle: the handle's buffer is gone (its last reference was let go, its holder
	// died), or this reference was let go already (a second FreeHandle, a replayed handle).
	// Nothing is done to the memory. Kind ErrNotOwned. The holder's Free of a buffer a peer
	// freed by its handle matches pinned.ErrDoubleFree too.
	ErrStaleHandle = errkind.New(pinmalloc.ErrNotOwned, "ipcpool: stale handle (its buffer was let go)")
	// ErrForeignHandle: the handle, or the slice, is not of this pool (another pool's id, a
	// place outside it, an interior or unknown pointer). Kind ErrNotOwned.
	ErrForeignHandle = errkind.New(pinmalloc.ErrNotOwned, "ipcpool: not a buffer of this pool")
	// ErrClosed: the process left the pool, or the owner closed it. Kind ErrClosed.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "ipcpool: pool closed or left")
	// ErrAttached: the owner's Close found processes still attached; nothing was released.
	// Kind ErrLiveBlocks.
	ErrAttached = errkind.New(pinmalloc.ErrLiveBlocks, "ipcpool: processes still attached")
	// ErrPoolFull: no grant of the pool is free, no process slot, or no export entry left.
	// Kind ErrOutOfMemory.
	ErrPoolFull = errkind.New(pinmalloc.ErrOutOfMemory, "ipcpool: pool full")
	// ErrInvalidOptions: options that cannot work (the CUDAHost backend where there is no CUDA
	// driver or no such device: the cause matches cuda.ErrNoDriver or cuda.ErrNoDevice). Kind
	// ErrInvalid.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "ipcpool: invalid options")
	// ErrMemlock: the memlock limit refused to lock the pool's memory. Kind ErrMemlock.
	ErrMemlock = errkind.New(pinmalloc.ErrMemlock, "ipcpool: memlock limit reached (raise ulimit -l, LimitMEMLOCK, or grant CAP_IPC_LOCK)")
	// ErrRefused: the owner refused the attaching process (its credentials are not allowed,
	// or no slot is free), the attaching process refused the server (its credentials are not
	// those AttachOptions allow), or no pool is served at the path; or the system refused Serve
	// the path (its folder, its lock file, its socket: the cause says why); or the system or the
	// CUDA driver refused to make, map, lock or give back the pool's memory (memfd_create,
	// ftruncate, mmap, madvise, munmap, an mlock refused for another reason than the memlock
	// limit, cuMemHostRegister, the VMM granules' creation, export, import or mapping: the cause,
	// an errno or the driver's error, says why; one for want of memory, the system's ENOMEM or
	// the driver's out of memory, matches pinmalloc.ErrOutOfMemory too). A handshake that took too
	// long (the owner gave it up past its Options.Timeout, or the attaching process's own
	// deadline passed) is no refusal: its error matches context.DeadlineExceeded instead.
	// Kind ErrRefused.
	ErrRefused = errkind.New(pinmalloc.ErrRefused, "ipcpool: refused")
	// ErrServed: Serve found another owner serving the path, or starting on it. Kind
	// ErrRefused.
	ErrServed = errkind.New(pinmalloc.ErrRefused, "ipcpool: another owner serves the path")
	// ErrProtocol: the socket or the control region carried something that is not this
	// package's protocol (another version, a truncated message, a value out of range): the
	// peer is cut off. A call that finds a word of the control region rewritten by another
	// process as fast as it changes it (Retain, Release, FreeHandle, the Free of a shared
	// buffer) fails with it too, having changed nothing: it may be tried again. Kind
	// ErrInvalid.
	ErrProtocol = errkind.New(pinmalloc.ErrInvalid, "ipcpool: protocol error")
)

// noMemory returns err, a refusal of the system's, made to match pinmalloc.ErrOutOfMemory too
// when its cause is ENOMEM (the system had no memory for the call), as ErrRefused says of a
// refusal for want of memory; its text is err's. Another err is returned as it is.
func noMemory(err error) error {
	if errors.Is(err, unix.ENOMEM) && !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		return errkind.Also(pinmalloc.ErrOutOfMemory, err, "ipcpool: ")
	}
	return err
}
