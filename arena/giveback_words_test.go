package arena

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
)

// checkGiveBackWords fails t unless err, a refusal to give memory back, matches ErrCommit (and
// pinmalloc.ErrRefused) and cause, and says that memory could not be given back, not that it
// could not be committed.
func checkGiveBackWords(t *testing.T, what string, err, cause error) {
	t.Helper()
	if !errors.Is(err, ErrCommit) || !errors.Is(err, pinmalloc.ErrRefused) || !errors.Is(err, cause) {
		t.Errorf("%s: %v; want ErrCommit, pinmalloc.ErrRefused and %v", what, err, cause)
		return
	}
	if msg := err.Error(); strings.Contains(msg, "cannot commit") ||
		!strings.Contains(msg, "arena: cannot give memory back") {
		t.Errorf("%s says %q; want that memory could not be given back, and no commit", what, msg)
	}
}

// TestHostDecommitGiveBackWords: a host provider's Decommit whose munlock, madvise or mprotect
// fails says that memory could not be given back, and matches ErrCommit, the system's error and
// (past the munlock) ErrDecommitUnfinished as before. Before, it said "arena: cannot commit
// memory: munlock: ...", a commit where memory was being given back.
func TestHostDecommitGiveBackWords(t *testing.T) {
	const size = 64 << 10
	for _, c := range []struct {
		name       string
		locked     bool
		munlock    bool // refuse the munlock, else the madvise
		unfinished bool
	}{
		{"locked, munlock refused", true, true, false},
		{"locked, madvise refused", true, false, true},
		{"pageable, madvise refused", false, false, false},
	} {
		h := PageableHost(HostOptions{})
		if c.locked {
			h = LockedHost(HostOptions{})
		}
		r, err := h.Reserve(size, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Commit(r, 0, size); err != nil {
			t.Fatal(err)
		}
		if c.munlock {
			h.munlockFn = func([]byte) error { return unix.EAGAIN }
		} else {
			h.madviseFn = func([]byte, int) error { return unix.EAGAIN }
		}
		err = h.Decommit(r, 0, size)
		checkGiveBackWords(t, c.name, err, unix.EAGAIN)
		if errors.Is(err, ErrDecommitUnfinished) != c.unfinished {
			t.Errorf("%s: %v; ErrDecommitUnfinished %v, want %v", c.name, err,
				!c.unfinished, c.unfinished)
		}
		h.munlockFn, h.madviseFn = nil, nil
		if err := h.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExternalDecommitGiveBackWords: an exclusive external region's Decommit whose madvise
// fails (the memory is locked: MADV_DONTNEED refuses it with EINVAL) says that memory could not
// be given back. Before, it said "arena: cannot commit memory".
func TestExternalDecommitGiveBackWords(t *testing.T) {
	page := uintptr(unix.Getpagesize())
	b, err := unix.Mmap(-1, 0, int(2*page), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(b) }()
	if err := unix.Mlock(b); err != nil {
		t.Fatalf("mlock of 2 pages: %v", err)
	}
	base := uintptr(unsafe.Pointer(&b[0]))
	e, err := External(ExternalRegion{Base: base, Size: 2 * page, Kind: HostPageable,
		Committed: true, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Reserve(2*page, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkGiveBackWords(t, "madvise of locked external memory", e.Decommit(r, 0, 2*page),
		unix.EINVAL)
	if err := e.Release(r); err != nil {
		t.Fatal(err)
	}
}

// TestHostReleaseGiveBackWords: a host provider's Release whose munmap fails says that memory
// could not be given back, matches ErrCommit and the system's error, and keeps the region for
// a later Release, which gives it back. Before, it said "arena: invalid argument: munmap: ...",
// an argument fault where the memory was not given back.
func TestHostReleaseGiveBackWords(t *testing.T) {
	h := PageableHost(HostOptions{})
	r, err := h.Reserve(64<<10, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.munmapFn = func(uintptr, uintptr) error { return unix.ENOMEM }
	err = h.Release(r)
	checkGiveBackWords(t, "munmap refused", err, unix.ENOMEM)
	if errors.Is(err, ErrInvalid) {
		t.Errorf("munmap refused: %v; want no ErrInvalid", err)
	}
	h.munmapFn = nil
	if err := h.Release(r); err != nil {
		t.Fatalf("Release after the refused munmap: %v", err)
	}
}
