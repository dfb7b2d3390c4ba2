package shared

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// DefaultMaxRegistration caps one CUDA registration (and so one region) when
// Options.MaxRegistration is zero: drivers from r580 on refuse a registration of 512 GiB or
// more, and 64 GiB pieces are what the projects that met it settled on.
const DefaultMaxRegistration = 64 << 30

// registerFlags: a registration every context of the process sees, mapped for the device.
const registerFlags = icuda.HostRegisterPortable | icuda.HostRegisterDeviceMap

// procConfig is what newProcess needs besides the hello: how this process maps and pins.
type procConfig struct {
	mode     lockMode
	align    uintptr
	dev      *cuda.Device
	fallback bool
	backend  Backend
	handles  []icuda.MemHandle // the owner's VMM regions, to map rather than import
}

// mapRegion maps region fd and, with a device, registers it with the process's CUDA context
// as one registration (a region is at most MaxRegistration bytes, and no buffer crosses a
// region, so no copy spans two registrations). When locking or registering is refused and
// cfg.fallback is set, the region stays mapped pageable (or locked but unregistered), and
// the process counts it in Stats.PageableRegions; otherwise the refusal is the error.
func (p *Process) mapRegion(fd int, cfg procConfig) error {
	base, err := mapFd(fd, p.regionSize, mapAlign, cfg.mode)
	if errors.Is(err, ErrMemlock) && cfg.fallback {
		p.fallbacks = append(p.fallbacks, err.Error())
		base, err = mapFd(fd, p.regionSize, mapAlign, lockNone)
	}
	if err != nil {
		return err
	}
	p.maps = append(p.maps, base)
	p.registered = append(p.registered, false)
	if cfg.dev == nil {
		return nil
	}
	d, err := icuda.Of(cfg.dev)
	if err == nil {
		err = d.MemHostRegister(base, p.regionSize, registerFlags)
	}
	if err != nil {
		if cfg.fallback {
			p.fallbacks = append(p.fallbacks, fmt.Sprintf("registering region %d: %v", len(p.maps)-1, err))
			return nil
		}
		return fmt.Errorf("shared: registering region %d (%d bytes) with CUDA: %w", len(p.maps)-1, p.regionSize, err)
	}
	p.dev = d
	p.registered[len(p.registered)-1] = true
	return nil
}

// unregisterAll undoes mapRegion's registrations.
func (p *Process) unregisterAll() error {
	var first error
	for i, r := range p.registered {
		if !r {
			continue
		}
		if err := p.dev.MemHostUnregister(p.maps[i]); err != nil && first == nil {
			first = fmt.Errorf("shared: unregistering region %d: %w", i, err)
		}
		p.registered[i] = false
	}
	return first
}
