package ipcpool

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The pool's memory in one process: the regions (memfds, or VMM granules: vmm.go) mapped one
// after the other in one reservation of address space aligned to 2 MiB, so that the pool is
// one range [base, base+poolBytes) in every process (each at its own base), which its grant
// source lends from (source.go); and the control region, mapped on its own.

var pageSize = uintptr(unix.Getpagesize())

// mapAlign is the alignment of the pool's range: a heap segment (an arena chunk) starts on it.
const mapAlign = 2 << 20

// newMemfd creates a memfd of size bytes, sealed against shrinking and growing, so that no
// process can truncate it under the others' mappings (a SIGBUS in every process).
func newMemfd(name string, size uintptr) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, noMemory(fmt.Errorf("%w: memfd_create: %w", ErrRefused, err))
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, noMemory(fmt.Errorf("%w: ftruncate memfd to %d bytes: %w", ErrRefused, size, err))
	}
	if err := seal(fd); err != nil {
		unix.Close(fd)
		return -1, noMemory(fmt.Errorf("%w: sealing memfd: %w", ErrRefused, err))
	}
	return fd, nil
}

// seal is sealMemfd; tests make it fail.
var seal = sealMemfd

// sealMemfd seals fd against shrinking, growing and further seals (F_ADD_SEALS).
func sealMemfd(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	return err
}

// checkMemfd verifies that fd is a memfd of exactly size bytes sealed against shrinking and
// growing: a process maps nothing a peer could pull from under it. The seals come first: the
// size of a file not sealed yet is the peer's to change after it was read.
func checkMemfd(fd int, size uintptr) error {
	if err := checkSealed(fd); err != nil {
		return err
	}
	if memfdBetweenChecks != nil {
		memfdBetweenChecks(fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: fstat: %w", ErrProtocol, err)
	}
	if st.Size < 0 || uintptr(st.Size) != size {
		return fmt.Errorf("%w: a memfd of %d bytes, want %d", ErrProtocol, st.Size, size)
	}
	return nil
}

// memfdBetweenChecks, set by tests only, runs between checkMemfd's two checks: a peer changing
// its file meanwhile.
var memfdBetweenChecks func(fd int)

// checkSealed verifies that fd is a memfd sealed against shrinking and growing. It asks the
// kernel only, reading nothing, so that a peer's descriptor of another file (a FUSE file, a
// file on a stalled mount) cannot hang the process that checks it.
func checkSealed(fd int) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return fmt.Errorf("%w: a file of the pool that is not a memfd sealed against shrinking and growing", ErrProtocol)
	}
	return nil
}

// distinctFiles verifies that no two of fds are one file (a region's descriptor sent twice, or
// the control region's sent again as a region): two regions mapped from one file are one
// memory, and the grants of each would be lent as distinct memory (overlapping buffers), or the
// control region would be buffer memory. Two descriptors are one file when they are one open
// file (kcmp KCMP_FILE: one descriptor sent twice, or a duplicate of one), or regular files
// (memfds) of one inode. Other files of one inode pass: a GPU driver's VMM exports are
// descriptors it opens on its device node, one inode for every allocation (UNMEASURED: NVIDIA's
// RM interface headers), so that two exports of one allocation cannot be told from exports of
// two there (the fake driver's exports are memfds of their allocation, and can). Where the
// kernel refuses kcmp (built without it, or a seccomp filter), only regular files are checked.
func distinctFiles(fds []int) error {
	type file struct {
		dev, ino uint64
		regular  bool
	}
	files := make([]file, len(fds))
	for i, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%w: fstat: %w", ErrProtocol, err)
		}
		files[i] = file{uint64(st.Dev), st.Ino, st.Mode&unix.S_IFMT == unix.S_IFREG}
	}
	kcmp := true
	for i, f := range files {
		for j, g := range files[:i] {
			if f.dev != g.dev || f.ino != g.ino { // one open file is one inode
				continue
			}
			same := f.regular
			if !same && kcmp {
				var err error
				if same, err = sameOpenFile(fds[i], fds[j]); err != nil {
					kcmp = false
				}
			}
			if same {
				return fmt.Errorf("%w: one file sent as two of the pool's regions (or as its control region and a region)", ErrProtocol)
			}
		}
	}
	return nil
}

// kcmpFile is KCMP_FILE of <linux/kcmp.h> (x/sys lacks it).
const kcmpFile = 0

// sameOpenFile reports whether descriptors a and b of this process are one open file, or the
// kernel's refusal to say.
func sameOpenFile(a, b int) (bool, error) {
	pid := uintptr(os.Getpid())
	r, _, e := unix.Syscall6(unix.SYS_KCMP, pid, pid, kcmpFile, uintptr(a), uintptr(b), 0)
	if e != 0 {
		return false, e
	}
	return r == 0, nil
}

// noFork marks [base, base+size) MADV_DONTFORK: a child forked without exec (through cgo, or
// a raw fork) gets nothing mapped there. The owner watches this process only: a child that
// kept the pool's memory would use it after this process exited, while the owner lends it to
// another. (The mappings are shared, so a fork does not make them copy-on-write here.)
func noFork(base, size uintptr) error {
	if err := madvise(mem.Bytes(base, size), unix.MADV_DONTFORK); err != nil {
		return noMemory(fmt.Errorf("%w: keeping the pool's mapping from a forked child (madvise): %w", ErrRefused, err))
	}
	return nil
}

// madvise is madvise(2); tests make it fail.
var madvise = unix.Madvise

// mlockOnFault is MLOCK_ONFAULT of <linux/mman.h> (x/sys lacks it).
const mlockOnFault = 1

// lockMode says how a mapping is locked.
type lockMode uint8

const (
	lockNone    lockMode = iota // the control region; a region left pageable
	lockNow                     // the owner that made the pool: fault every page in and lock it (mlock)
	lockOnFault                 // every other process: lock pages as they are touched (mlock2 MLOCK_ONFAULT)
)

// reserve reserves size bytes of address space aligned to align, and returns its base. A
// reservation the system refuses (no address space left, a vm.max_map_count or RLIMIT_AS
// reached) is ErrRefused, the errno kept (ENOMEM matching pinmalloc.ErrOutOfMemory too): the
// system refuses the mapping, the pool is not full.
func reserve(size, align uintptr) (uintptr, error) {
	res, err := mmapReserve(-1, 0, nil, size+align, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, noMemory(fmt.Errorf("%w: reserving %d bytes of address space: %w", ErrRefused, size+align, err))
	}
	lo := uintptr(res)
	base := (lo + align - 1) &^ (align - 1)
	if base > lo {
		_ = unix.MunmapPtr(res, base-lo)
	}
	if end := lo + size + align; end > base+size {
		_ = unix.MunmapPtr(mem.Ptr(base+size), end-base-size)
	}
	return base, nil
}

// mmapReserve is reserve's mmap(2); tests make it fail.
var mmapReserve = unix.MmapPtr

// mapAt maps size bytes of fd shared at addr, inside a reservation.
func mapAt(fd int, addr, size uintptr) error {
	if _, err := unix.MmapPtr(fd, 0, mem.Ptr(addr), size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return noMemory(fmt.Errorf("%w: mapping %d bytes of a memfd: %w", ErrRefused, size, err))
	}
	return nil
}

// mlock is mlock(2); tests make it fail part-way.
var mlock = unix.Mlock

// lock locks [base, base+size) as mode says. On failure nothing of the range stays locked: an
// mlock that fails part-way leaves the pages before the failure locked, charged to
// RLIMIT_MEMLOCK, and a pool that goes on pageable (Options.FallbackPageable) would keep them so.
func lock(base, size uintptr, mode lockMode) error {
	var err error
	switch mode {
	case lockNow:
		err = mlock(mem.Bytes(base, size))
	case lockOnFault:
		if _, _, e := unix.Syscall(unix.SYS_MLOCK2, base, size, mlockOnFault); e != 0 {
			err = e
		}
	}
	if err == nil {
		return nil
	}
	_ = unix.Munlock(mem.Bytes(base, size)) // harmless on pages not locked
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: locking %d bytes: %w", ErrMemlock, size, err)
	}
	return fmt.Errorf("%w: locking %d bytes: %w", ErrRefused, size, err)
}

// mapCtl maps the control region: its own mapping, not locked.
func mapCtl(fd int, size uintptr) (uintptr, error) {
	if mapFault != nil {
		if err := mapFault(); err != nil {
			return 0, err
		}
	}
	base, err := reserve(size, pageSize)
	if err != nil {
		return 0, err
	}
	if err := mapAt(fd, base, size); err != nil {
		_ = unmap(base, size)
		return 0, err
	}
	if err := noFork(base, size); err != nil {
		_ = unmap(base, size)
		return 0, err
	}
	return base, nil
}

// unmap unmaps [base, base+size).
func unmap(base, size uintptr) error {
	if err := unix.MunmapPtr(mem.Ptr(base), size); err != nil {
		return noMemory(fmt.Errorf("%w: munmap: %w", ErrRefused, err))
	}
	return nil
}

// words views a mapping as 64-bit words.
func words(base, size uintptr) []uint64 {
	return unsafe.Slice((*uint64)(mem.Ptr(base)), size/8)
}

// mapFault, when set (by tests), makes mapCtl fail with its error before it maps anything.
var mapFault func() error
