package ipcpool

import (
	"errors"
	"fmt"
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
// says. It takes the descriptors: on error they are closed.
func mapSpace(l layout, ctlSize uintptr, fds []int, cfg spaceConfig) (*space, error) {
	sp := &space{layout: l, ctlSize: ctlSize, fds: fds, registered: make([]bool, l.regions)}
	if err := sp.mapAll(cfg); err != nil {
		sp.close(false)
		return nil, err
	}
	return sp, nil
}

func (sp *space) mapAll(cfg spaceConfig) error {
	if len(sp.fds) != 1+sp.regions {
		return fmt.Errorf("%w: %d descriptors for %d regions", ErrProtocol, len(sp.fds), sp.regions)
	}
	if err := checkMemfd(sp.fds[0], sp.ctlSize); err != nil {
		return err
	}
	var err error
	if sp.ctlBase, err = mapCtl(sp.fds[0], sp.ctlSize); err != nil {
		return err
	}
	if cfg.vmm {
		return sp.mapVMM(cfg)
	}
	for _, fd := range sp.fds[1:] {
		if err := checkMemfd(fd, sp.regionSize); err != nil {
			return err
		}
	}
	if sp.base, err = reserve(sp.poolBytes(), mapAlign); err != nil {
		return err
	}
	for i, fd := range sp.fds[1:] {
		if err := mapAt(fd, sp.regionAddr(i), sp.regionSize); err != nil {
			return err
		}
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
			return fmt.Errorf("ipcpool: region %d: %w", i, err)
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
func (sp *space) close(junk bool) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for i, r := range sp.registered {
		if r {
			keep(cudamem.UnregisterShared(sp.dev, sp.regionAddr(i)))
			sp.registered[i] = false
		}
	}
	if sp.vmm != nil {
		keep(sp.vmm.Close())
		sp.vmm = nil
	}
	if sp.base != 0 {
		if junk {
			_, err := unix.MmapPtr(-1, 0, mem.Ptr(sp.base), sp.poolBytes(), unix.PROT_READ|unix.PROT_WRITE,
				unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
			keep(err)
		} else {
			keep(unmap(sp.base, sp.poolBytes()))
		}
		sp.base = 0
	}
	if sp.ctlBase != 0 {
		keep(unmap(sp.ctlBase, sp.ctlSize))
		sp.ctlBase = 0
	}
	sp.fdsMu.Lock()
	closeFds(sp.fds)
	sp.fds = nil
	sp.fdsMu.Unlock()
	return first
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
