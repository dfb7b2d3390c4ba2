package arena

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"golang.org/x/sys/unix"
)

// Sentinel errors. Every error the arena returns wraps one of them (and the system or driver
// error that caused it, where there is one), so callers can test with errors.Is. A sentinel of
// a kind the module's packages share matches that kind too (arena.ErrClosed matches
// pinmalloc.ErrClosed; ErrBusy, chunks still handed out at Close, pinmalloc.ErrLiveBlocks).
var (
	// ErrReserve means address space could not be reserved (mmap failed, the driver refused).
	ErrReserve = errkind.New(pinmalloc.ErrRefused, "arena: cannot reserve memory")
	// ErrCommit means reserved memory could not be backed by physical memory.
	ErrCommit = errkind.New(pinmalloc.ErrRefused, "arena: cannot commit memory")
	// ErrMemlock means the memlock limit (RLIMIT_MEMLOCK) does not allow locking more memory.
	// The error text names the current limit and how to raise it.
	ErrMemlock = errkind.New(pinmalloc.ErrMemlock, "arena: memlock limit reached")
	// ErrCapacity means the request does not fit in the arena's capacity.
	ErrCapacity = errkind.New(pinmalloc.ErrOutOfMemory, "arena: capacity exhausted")
	// ErrInvalid means an argument is out of range (zero or absurd size, bad alignment,
	// a range outside the region).
	ErrInvalid = errkind.New(pinmalloc.ErrInvalid, "arena: invalid argument")
	// ErrClosed means the arena or provider was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "arena: closed")
	// ErrBusy means Close was called while chunks were still handed out.
	ErrBusy = errkind.New(pinmalloc.ErrLiveBlocks, "arena: chunks still in use")
	// ErrReleaseRefused means the provider refused to release a region (Provider.Release).
	// The arena keeps the region, out of use and counted in Stats.RegionsRefused, and releases
	// it again at the purge timer's ticks (armed for it, backing off), Trim, Close and an Alloc
	// short of capacity; Close returns it while refused.
	ErrReleaseRefused = errkind.New(pinmalloc.ErrRefused, "arena: region not released")
	// ErrNotHostAccessible means the CPU cannot access the memory (device memory): Bytes
	// refuses to view it.
	ErrNotHostAccessible = errkind.New(pinmalloc.ErrInvalid, "arena: memory is not accessible by the CPU")
)

// ErrDecommitUnfinished, in the error of a provider's Decommit, means the provider could not
// finish giving the range back (drop its pages, protect it) after the range had stopped being
// committed all the same: its lock or registration is undone, and the kernel or the driver no
// longer counts it. The arena then counts the range decommitted, never takes it to read as
// zero, and commits it again before it hands it out. Any other Decommit error leaves the range
// committed.
var ErrDecommitUnfinished = errkind.New(pinmalloc.ErrRefused, "arena: decommit left unfinished")

// ErrExhausted means a provider could not commit memory for want of it: device memory, host
// memory the driver could not pin, the memlock limit. Providers wrap it (beside their own
// cause) so that the arena knows to give back the memory waiting for the purge and try again,
// without naming any provider's errors.
var ErrExhausted = errkind.New(pinmalloc.ErrOutOfMemory, "arena: out of memory")

// Exhausted reports whether err says memory ran out, rather than that it was refused for
// another reason: an error of kind pinmalloc.ErrOutOfMemory (ErrExhausted, ErrCapacity, the
// driver's out of memory), the memlock limit (ErrMemlock), or the system's ENOMEM or EAGAIN
// (an mmap or a commit). Giving memory back can make a later try succeed only then; callers
// use it to decide whether to trim and try again, and whether to report out of memory.
func Exhausted(err error) bool {
	return errors.Is(err, pinmalloc.ErrOutOfMemory) || errors.Is(err, pinmalloc.ErrMemlock) ||
		errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EAGAIN)
}

// ErrNotStarted, in the error of a provider's Zero, means the clear failed before it began: it
// wrote nothing and will write nothing (the driver refused its memset, or no stream could be
// had for it), so the range may be handed to another user at once. A failed Zero whose error
// does not wrap it may still clear the range later (Zeroer). Providers mark such errors with
// NotStarted.
var ErrNotStarted = errkind.New(pinmalloc.ErrRefused, "arena: clear not started")

// NotStarted returns err, the error of a Zero that wrote nothing and will write nothing, made
// to match ErrNotStarted (and its kind) too under errors.Is; its text is err's. A nil err
// stays nil.
func NotStarted(err error) error {
	if err == nil {
		return nil
	}
	return &notStarted{err}
}

// notStarted is an error of NotStarted.
type notStarted struct{ err error }

func (e *notStarted) Error() string { return e.err.Error() }

// Unwrap returns the error and ErrNotStarted.
func (e *notStarted) Unwrap() []error { return []error{e.err, ErrNotStarted} }
