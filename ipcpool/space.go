package ipcpool

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// space is the pool mapped in one process: the regions one after the other from base, and
// the control region. It keeps the descriptors it mapped open (ctl first), so that the
// process can hand the pool to a new owner if its owner dies.
type space struct {
	layout
	base    uintptr
	ctlBase uintptr
	ctlSize uintptr
	fds     []int // the control region's, then each region's
	// fdsMu guards fds against the close while a rejoin donates them to a new owner (from
	// the client's goroutine, while the process may be leaving: donate).
	fdsMu sync.Mutex
	// registered says which regions are registered with dev (a CUDAHost process of a memfd
	// pool); pageable lists the refusals that left regions pageable or unregistered
	// (FallbackPageable).
	registered []bool
	dev        *cuda.Device
	pageable   []string
	vmm        *cudamem.HostMapping // a VMM pool's granules, mapped
	// unreleased are a VMM pool's granules (the owner's, or imported) not yet handed to the
	// mapping, and those whose release the driver refused: close releases them.
	unreleased []*cudamem.HostExport
	junk       bool // close was asked to leave junk where the pool was
	// exposed says a close could not make part of the pool's memory unreachable here (an
	// mprotect, unmap or mapping of junk refused): the process's grants must not go back.
	exposed bool
	// mprotect, when set (by tests), replaces unix.Mprotect.
	mprotect func([]byte, int) error
}

// spaceConfig is how a process maps the pool.
type spaceConfig struct {
	mode     lockMode
	fallback bool
	dev      *cuda.Device // registers memfd regions, imports VMM ones; nil: none
	vmm      bool
	exports  []*cudamem.HostExport // the owner's VMM regions, to map rather than import
}

// mapSpace maps the control region (fds[0], ctlSize bytes) and the regions (fds[1:]) as cfg
// says. It takes the descriptors and cfg.exports: on error the descriptors are closed and the
// exports released (what the driver refuses stays with the package: abandon).
func mapSpace(l layout, ctlSize uintptr, fds []int, cfg spaceConfig) (*space, error) {
	sp := &space{layout: l, ctlSize: ctlSize, fds: fds, registered: make([]bool, l.regions)}
	if err := sp.mapAll(cfg); err != nil {
		return nil, abandon(sp, cfg.dev, err)
	}
	return sp, nil
}

func (sp *space) mapAll(cfg spaceConfig) error {
	sp.unreleased = cfg.exports
	if len(sp.fds) != 1+sp.regions {
		return fmt.Errorf("%w: %d descriptors for %d regions", ErrProtocol, len(sp.fds), sp.regions)
	}
	if err := checkMemfd(sp.fds[0], sp.ctlSize); err != nil {
		return err
	}
	if !cfg.vmm {
		for _, fd := range sp.fds[1:] {
			if err := checkMemfd(fd, sp.regionSize); err != nil {
				return err
			}
		}
	}
	if err := distinctFiles(sp.fds); err != nil {
		return err
	}
	var err error
	if sp.ctlBase, err = mapCtl(sp.fds[0], sp.ctlSize); err != nil {
		return err
	}
	if cfg.vmm {
		return sp.mapVMM(cfg)
	}
	if sp.base, err = reserve(sp.poolBytes(), mapAlign); err != nil {
		return err
	}
	for i, fd := range sp.fds[1:] {
		if err := mapAt(fd, sp.regionAddr(i), sp.regionSize); err != nil {
			return err
		}
	}
	if err := noFork(sp.base, sp.poolBytes()); err != nil {
		return err
	}
	if err := lock(sp.base, sp.poolBytes(), cfg.mode); err != nil {
		if !errors.Is(err, ErrMemlock) || !cfg.fallback {
			return err
		}
		sp.pageable = append(sp.pageable, err.Error())
	}
	if cfg.dev == nil {
		return nil
	}
	sp.dev = cfg.dev
	for i := range sp.regions {
		// One registration per region: a region is at most MaxRegistration bytes, and no
		// buffer crosses a region, so no copy spans two registrations.
		if err := cudamem.RegisterShared(cfg.dev, sp.regionAddr(i), sp.regionSize); err != nil {
			if cfg.fallback {
				sp.pageable = append(sp.pageable, fmt.Sprintf("registering region %d: %v", i, err))
				continue
			}
			return fmt.Errorf("%w: registering region %d: %w", ErrRefused, i, err)
		}
		sp.registered[i] = true
	}
	return nil
}

// regionAddr is where region i starts in this process.
func (sp *space) regionAddr(i int) uintptr { return sp.base + uintptr(i)*sp.regionSize }

// in returns the pool offset of [addr, addr+n), or false when it is not inside one region.
func (sp *space) in(addr, n uintptr) (uintptr, bool) {
	if sp.base == 0 || addr < sp.base {
		return 0, false
	}
	off := addr - sp.base
	return off, sp.sameRegion(uint64(off), uint64(n))
}

// bytes returns the pool's bytes [off, off+n) in this process (checked by the caller).
func (sp *space) bytes(off, n uintptr) []byte { return mem.Bytes(sp.base+off, n) }

// ctl returns the process's view of the control region.
func (sp *space) ctl() ctl {
	return newCtl(sp.layout, words(sp.ctlBase, sp.ctlSize))
}

// close unregisters and unmaps everything and closes the descriptors. With junk set, the
// pool's range is left mapped to fresh anonymous memory rather than unmapped: buffers a
// process still holds after it left then read and write memory of their own, never a
// fault, never the pool's.
//
// What the driver refuses to give back stays: a region whose unregistration is refused stays
// registered and mapped (unmapped, its pages would stay pinned by the driver until the
// context goes, and no later call could unregister them), as does a VMM mapping whose Close
// is refused; held then says so, and the next close tries them again before it unmaps the
// range. Meanwhile the regions given back are left reserved (junk where junk was asked) and
// a kept region is made inaccessible, so that no buffer of this process (one given up, or a
// stale slice of one freed) reaches the pool's memory, which the owner lends again; the
// control region and the descriptors go at once.
func (sp *space) close(junk bool) error {
	sp.junk = sp.junk || junk
	var errs []error
	for i, r := range sp.registered {
		if !r {
			continue
		}
		if err := cudamem.UnregisterShared(sp.dev, sp.regionAddr(i)); err != nil {
			errs = append(errs, fmt.Errorf("%w: region %d stays registered and mapped until the next Close: %w", ErrRefused, i, err))
			continue
		}
		sp.registered[i] = false
	}
	if sp.vmm != nil {
		if err := sp.vmm.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%w: the pool's memory stays mapped until the next Close: %w", ErrRefused, err))
		} else {
			sp.vmm = nil
		}
	}
	var kept []*cudamem.HostExport
	for _, e := range sp.unreleased {
		if err := e.Release(); err != nil {
			errs = append(errs, fmt.Errorf("%w: host granules of the pool stay until the next Close: %w", ErrRefused, err))
			kept = append(kept, e)
		}
	}
	sp.unreleased = kept
	if sp.base != 0 {
		if sp.held() {
			errs = append(errs, sp.keepRegions())
		} else {
			err := sp.fill(sp.base, sp.poolBytes(), false)
			sp.exposed = sp.exposed || err != nil
			errs = append(errs, err)
			sp.base = 0
		}
	}
	if sp.ctlBase != 0 {
		errs = append(errs, unmap(sp.ctlBase, sp.ctlSize))
		sp.ctlBase = 0
	}
	sp.fdsMu.Lock()
	closeFds(sp.fds)
	sp.fds = nil
	sp.fdsMu.Unlock()
	return errors.Join(errs...)
}

// held reports whether close kept memory the driver refused to give back.
func (sp *space) held() bool {
	return sp.vmm != nil || len(sp.unreleased) > 0 || slices.Contains(sp.registered, true)
}

// keepRegions is close's unmap while memory is held: a memfd pool's regions given back are
// replaced by junk (or by reserved address space, so that nothing else is mapped inside the
// range before the last close unmaps it), and the regions still registered are made
// inaccessible (mprotect: the mapping, and so the registration, stays), with or without junk:
// the process's grants go back all the same (unless one of these fails: exposed), and the
// owner lends them to other processes. A VMM pool's range is the driver's mapping, left as it
// is (its grants stay the process's: leaveAll).
func (sp *space) keepRegions() error {
	if sp.vmm != nil {
		return nil
	}
	protect := unix.Mprotect
	if sp.mprotect != nil {
		protect = sp.mprotect
	}
	var errs []error
	for i, r := range sp.registered {
		if r {
			err := protect(mem.Bytes(sp.regionAddr(i), sp.regionSize), unix.PROT_NONE)
			if err != nil {
				errs = append(errs, noMemory(fmt.Errorf("%w: mprotect: %w", ErrRefused, err)))
			}
			continue
		}
		errs = append(errs, sp.fill(sp.regionAddr(i), sp.regionSize, true))
	}
	err := errors.Join(errs...)
	sp.exposed = sp.exposed || err != nil
	return err
}

// fill unmaps [addr, addr+n), or maps fresh anonymous memory there with junk set, or
// reserved address space (no access) with reserve set: marked MADV_DONTFORK as the pool's
// mappings were (noFork), so that a child forked without exec gets nothing of the range
// whatever a Close left there.
func (sp *space) fill(addr, n uintptr, reserve bool) error {
	prot := unix.PROT_NONE
	switch {
	case sp.junk:
		prot = unix.PROT_READ | unix.PROT_WRITE
	case !reserve:
		return unmap(addr, n)
	}
	if _, err := unix.MmapPtr(-1, 0, mem.Ptr(addr), n, prot,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
		return noMemory(fmt.Errorf("%w: mapping junk over the pool: %w", ErrRefused, err))
	}
	return noFork(addr, n)
}

// donate calls send with the space's descriptors, none of them closed until it returns, and
// reports whether it did: not once the space is closed (its descriptors gone, or about to be
// some other file's).
func (sp *space) donate(send func(fds []int) error) (bool, error) {
	sp.fdsMu.Lock()
	defer sp.fdsMu.Unlock()
	if sp.fds == nil {
		return false, nil
	}
	return true, send(sp.fds)
}
