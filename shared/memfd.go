package shared

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// mapAlign is the alignment of every region mapping: a heap segment (an arena chunk) starts
// on it, as it does in a pool of one process.
const mapAlign = 2 << 20

// newMemfd creates a memfd of size bytes, sealed against shrinking and growing, so that no
// attached process can truncate it under the others' mappings (a SIGBUS in every process).
func newMemfd(name string, size uintptr) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("shared: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shared: ftruncate memfd to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shared: sealing memfd: %w", err)
	}
	return fd, nil
}

// checkMemfd verifies that fd is a memfd of at least size bytes sealed against shrinking: an
// attaching process maps nothing a peer could pull from under it.
func checkMemfd(fd int, size uintptr) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: fstat: %v", ErrProtocol, err)
	}
	if uintptr(st.Size) < size {
		return fmt.Errorf("%w: memfd of %d bytes, want %d", ErrProtocol, st.Size, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("%w: region file is not a memfd sealed against shrinking", ErrProtocol)
	}
	return nil
}

// mlockOnFault is MLOCK_ONFAULT of <linux/mman.h> (x/sys lacks it).
const mlockOnFault = 1

// lockMode says how a mapping is locked.
type lockMode uint8

const (
	lockNone    lockMode = iota // the control region
	lockNow                     // the owner: fault every page in and lock it (mlock)
	lockOnFault                 // an attached process: lock pages as they are touched (mlock2 MLOCK_ONFAULT)
)

// mapFd maps size bytes of fd shared, at an address aligned to align, and locks them as mode
// says. It returns the mapping's base.
func mapFd(fd int, size, align uintptr, mode lockMode) (uintptr, error) {
	// Over-reserve address space, place the file at the aligned address inside it with
	// MAP_FIXED, and give the ends back.
	res, err := unix.MmapPtr(-1, 0, nil, size+align, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("%w: reserving %d bytes of address space: %v", ErrPoolFull, size+align, err)
	}
	lo := uintptr(res)
	base := (lo + align - 1) &^ (align - 1)
	if _, err := unix.MmapPtr(fd, 0, mem.Ptr(base), size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		_ = unix.MunmapPtr(res, size+align)
		return 0, fmt.Errorf("shared: mapping %d bytes of a memfd: %w", size, err)
	}
	if base > lo {
		_ = unix.MunmapPtr(res, base-lo)
	}
	if end := lo + size + align; end > base+size {
		_ = unix.MunmapPtr(mem.Ptr(base+size), end-base-size)
	}
	var lerr error
	switch mode {
	case lockNow:
		lerr = unix.Mlock(mem.Bytes(base, size))
	case lockOnFault:
		if _, _, e := unix.Syscall(unix.SYS_MLOCK2, base, size, mlockOnFault); e != 0 {
			lerr = e
		}
	}
	if lerr != nil {
		_ = unix.MunmapPtr(mem.Ptr(base), size)
		if errors.Is(lerr, unix.ENOMEM) || errors.Is(lerr, unix.EAGAIN) || errors.Is(lerr, unix.EPERM) {
			return 0, fmt.Errorf("%w: locking %d bytes: %v", ErrMemlock, size, lerr)
		}
		return 0, fmt.Errorf("shared: locking %d bytes: %w", size, lerr)
	}
	return base, nil
}

// unmap unmaps a mapping of mapFd.
func unmap(base, size uintptr) error {
	if err := unix.MunmapPtr(mem.Ptr(base), size); err != nil {
		return fmt.Errorf("shared: munmap: %w", err)
	}
	return nil
}

// words views a mapping as 64-bit words.
func words(base, size uintptr) []uint64 {
	return unsafe.Slice((*uint64)(mem.Ptr(base)), size/8)
}
