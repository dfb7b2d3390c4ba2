package arena

// CUDA providers: pinned host memory (mmap + cuMemHostRegister, or cuMemHostAlloc), device
// memory (the VMM API, or cuMemAlloc) and managed memory (cuMemAllocManaged), all through
// internal/cuda, which loads the driver at run time. This file has what they share and the two
// host providers; cuda_device.go has the device and managed ones.
//
// Every provider takes an open *cuda.Device (cuda.Open reports cuda.ErrNoDriver on a machine
// without a driver) and never closes it: the caller keeps it open until every arena over the
// provider is closed. Every driver resource a provider holds is counted (CUDACounters), so
// tests can prove that closing an arena leaves nothing behind.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// CUDACounters counts the driver resources a CUDA provider holds now, and its calls.
type CUDACounters struct {
	// Registrations counts host ranges registered with cuMemHostRegister.
	Registrations int64
	// Allocations counts regions allocated whole (cuMemHostAlloc, cuMemAlloc, cuMemAllocManaged).
	Allocations int64
	// Reservations counts VMM address reservations.
	Reservations int64
	// Handles counts VMM physical allocations (one per committed granule).
	Handles int64
	// Committed is the memory backed through the driver, in bytes: registered host memory,
	// whole allocations, mapped VMM granules.
	Committed int64
	// Calls counts driver calls that allocate, free, register, map or unmap.
	Calls uint64
}

// Live is the number of driver resources held; zero once every arena over the provider is
// closed.
func (c CUDACounters) Live() int64 {
	return c.Registrations + c.Allocations + c.Reservations + c.Handles
}

// cudaBase is what every CUDA provider has: the device, and the counters.
type cudaBase struct {
	dev  *cuda.Device
	name string
	kind Kind

	registrations, allocations, reservations, handles, committed atomic.Int64
	calls                                                        atomic.Uint64
}

func newCUDABase(dev *cuda.Device, name string, kind Kind) (*cudaBase, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: %s provider: no CUDA device (open one with cuda.Open): %w",
			ErrInvalid, name, cuda.ErrNoDriver)
	}
	return &cudaBase{dev: dev, name: name, kind: kind}, nil
}

// Name implements Provider.
func (b *cudaBase) Name() string { return b.name }

// Kind implements Provider.
func (b *cudaBase) Kind() Kind { return b.kind }

// Device returns the CUDA device the provider allocates through.
func (b *cudaBase) Device() *cuda.Device { return b.dev }

// Counters returns the driver resources the provider holds.
func (b *cudaBase) Counters() CUDACounters {
	return CUDACounters{
		Registrations: b.registrations.Load(), Allocations: b.allocations.Load(),
		Reservations: b.reservations.Load(), Handles: b.handles.Load(), Committed: b.committed.Load(),
		Calls: b.calls.Load(),
	}
}

// call counts one driver call and, when it succeeded, adds delta to counter (nil: none).
func (b *cudaBase) call(counter *atomic.Int64, delta int64, err error) error {
	b.calls.Add(1)
	if err == nil && counter != nil {
		counter.Add(delta)
	}
	return err
}

// driverError wraps a failed driver call in the arena sentinel. When the driver is out of
// memory it says how much was asked, how much the device has free and how much this provider
// holds, and the error matches cuda.ErrOutOfMemory as well.
func (b *cudaBase) driverError(sentinel error, op string, size uintptr, err error) error {
	if !errors.Is(err, cuda.ErrOutOfMemory) {
		return fmt.Errorf("%w: %s of %d bytes on device %d: %w", sentinel, op, size, b.dev.Ordinal(), err)
	}
	free, total, ierr := b.dev.MemGetInfo()
	have := fmt.Sprintf("%d bytes free of %d", free, total)
	if ierr != nil {
		have = fmt.Sprintf("free memory unknown (%v)", ierr)
	}
	return fmt.Errorf("%w: %s of %d bytes on device %d: out of memory: %d bytes asked, %s on the device, "+
		"%d bytes committed by this %s provider: %w", sentinel, op, size, b.dev.Ordinal(), size, have,
		b.committed.Load(), b.name, err)
}

// devicePointer maps host memory registered or allocated mapped to its device address.
func (b *cudaBase) devicePointer(addr uintptr) (uintptr, error) {
	dp, err := b.dev.MemHostGetDevicePointer(addr)
	if err != nil {
		return 0, fmt.Errorf("%w: device pointer of %#x: %w", ErrInvalid, addr, err)
	}
	return dp, nil
}

// hostZero clears host-accessible memory with the CPU.
func hostZero(addr, size uintptr) error {
	clear(bytesAt(addr, size))
	return nil
}

// CUDA pinned host memory: mmap + cuMemHostRegister.

// regUnit bounds every registration: a commit is registered in pieces that never cross a
// multiple of regUnit from the region's base, so that decommitting a chunk (the arena
// decommits chunk by chunk) unregisters whole pieces and never has to register a remainder
// again.
const regUnit = DefaultChunkSize

// registerFlags maps registrations into the device's address space for every context.
const registerFlags = cuda.HostRegisterPortable | cuda.HostRegisterDeviceMap

// CUDAHostProvider hands out pinned host memory: anonymous memory mapped exactly as the
// pageable HostProvider maps it (over-reserved and trimmed, so regions are aligned for free;
// PROT_NONE until committed), registered with cuMemHostRegister when committed and unregistered
// when decommitted. Registration pins the pages itself, so nothing is mlocked and
// RLIMIT_MEMLOCK does not apply. Copies between this memory and any device run by DMA at full
// bandwidth, and the device can address it directly (DevicePointer).
type CUDAHostProvider struct {
	*cudaBase
	host *HostProvider

	mu   sync.Mutex
	regs map[uintptr][][]hostReg // by region base: per regUnit, its registrations
}

// hostReg is one registration: [off, off+size) from its region's base.
type hostReg struct{ off, size uintptr }

// NewCUDAHost returns a provider of host memory pinned and mapped by the CUDA driver of dev.
// o.HugePages applies as for the host providers; with o.Populate each region is committed and
// registered in full when reserved.
func NewCUDAHost(dev *cuda.Device, o HostOptions) (*CUDAHostProvider, error) {
	b, err := newCUDABase(dev, "cuda-host", HostPinned)
	if err != nil {
		return nil, err
	}
	return &CUDAHostProvider{cudaBase: b, host: Pageable(o), regs: map[uintptr][][]hostReg{}}, nil
}

// Caps implements Provider: those of the host mapping underneath.
func (p *CUDAHostProvider) Caps() Caps { return p.host.Caps() }

// HostCounters returns the system calls made for the mappings.
func (p *CUDAHostProvider) HostCounters() HostCounters { return p.host.Counters() }

// Reserve implements Provider.
func (p *CUDAHostProvider) Reserve(size, alignment uintptr) (*Region, error) {
	r, err := p.host.Reserve(size, alignment)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.regs[r.Base] = make([][]hostReg, (r.Size+regUnit-1)/regUnit)
	p.mu.Unlock()
	if r.Committed { // populated: register it all now, since Commit will never be called
		if err := p.register(r, 0, r.Size); err != nil {
			_ = p.Release(r)
			return nil, err
		}
	}
	return r, nil
}

// Commit implements Provider: the range is made accessible, then registered.
func (p *CUDAHostProvider) Commit(r *Region, off, size uintptr) error {
	if err := p.host.Commit(r, off, size); err != nil {
		return err
	}
	if err := p.register(r, off, size); err != nil {
		_ = p.host.Decommit(r, off, size)
		return err
	}
	return nil
}

// Decommit implements Provider: the range is unregistered, then its pages dropped.
func (p *CUDAHostProvider) Decommit(r *Region, off, size uintptr) error {
	if err := checkRange(r, off, size); err != nil {
		return err
	}
	if err := p.unregister(r, off, size); err != nil {
		return err
	}
	return p.host.Decommit(r, off, size)
}

// Release implements Provider. Registrations left (a populated region) are undone first.
func (p *CUDAHostProvider) Release(r *Region) error {
	if r == nil {
		return fmt.Errorf("%w: nil region", ErrInvalid)
	}
	err := p.unregister(r, 0, r.Size)
	p.mu.Lock()
	delete(p.regs, r.Base)
	p.mu.Unlock()
	return errors.Join(err, p.host.Release(r))
}

// Zero implements Zeroer, with the CPU.
func (p *CUDAHostProvider) Zero(addr, size uintptr) error { return hostZero(addr, size) }

// DevicePointer returns the device address of host address addr, which must be in committed
// memory of this provider. With unified addressing (every 64-bit platform CUDA supports) it is
// addr itself, but kernels should be given what this returns.
func (p *CUDAHostProvider) DevicePointer(addr uintptr) (uintptr, error) {
	return p.devicePointer(addr)
}

// register registers [off, off+size) in pieces that do not cross a regUnit boundary. On
// failure it undoes what it registered and returns an error wrapping ErrCommit and the
// driver's.
func (p *CUDAHostProvider) register(r *Region, off, size uintptr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	units := p.regs[r.Base]
	if units == nil {
		return fmt.Errorf("%w: region [%#x, +%d) not from this provider", ErrInvalid, r.Base, r.Size)
	}
	var done []hostReg
	for lo, end := off, off+size; lo < end; {
		hi := min((lo/regUnit+1)*regUnit, end)
		err := p.call(&p.registrations, 1, p.dev.MemHostRegister(r.Base+lo, hi-lo, registerFlags))
		if err != nil {
			for _, g := range done {
				p.unregisterOne(r, units, g)
			}
			return p.driverError(ErrCommit, "cuMemHostRegister", hi-lo, err)
		}
		g := hostReg{lo, hi - lo}
		units[lo/regUnit] = append(units[lo/regUnit], g)
		p.committed.Add(int64(g.size))
		done = append(done, g)
		lo = hi
	}
	return nil
}

// unregister undoes the registrations that overlap [off, off+size). A registration that
// reaches outside the range is registered again for the part outside: the purge decommits the
// pages a heap gave up inside a chunk still in use, so this is a common path, not a rare one.
func (p *CUDAHostProvider) unregister(r *Region, off, size uintptr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	units := p.regs[r.Base]
	if units == nil || size == 0 {
		return nil
	}
	end := off + size
	var errs []error
	reregister := func(u, lo, n uintptr) {
		err := p.call(&p.registrations, 1, p.dev.MemHostRegister(r.Base+lo, n, registerFlags))
		if err != nil {
			errs = append(errs, p.driverError(ErrCommit, "cuMemHostRegister", n, err))
			return
		}
		units[u] = append(units[u], hostReg{lo, n})
		p.committed.Add(int64(n))
	}
	for u := off / regUnit; u < uintptr(len(units)) && u*regUnit < end; u++ {
		for _, g := range append([]hostReg(nil), units[u]...) { // a copy: the loop edits units[u]
			if g.off >= end || g.off+g.size <= off {
				continue
			}
			if err := p.unregisterOne(r, units, g); err != nil {
				errs = append(errs, err)
				continue
			}
			if g.off < off {
				reregister(u, g.off, off-g.off)
			}
			if e := g.off + g.size; e > end {
				reregister(u, end, e-end)
			}
		}
	}
	return errors.Join(errs...)
}

// unregisterOne undoes registration g and removes it from its unit. p.mu is held.
func (p *CUDAHostProvider) unregisterOne(r *Region, units [][]hostReg, g hostReg) error {
	if err := p.call(&p.registrations, -1, p.dev.MemHostUnregister(r.Base+g.off)); err != nil {
		return fmt.Errorf("%w: cuMemHostUnregister at %#x: %w", ErrCommit, r.Base+g.off, err)
	}
	p.committed.Add(-int64(g.size))
	u := g.off / regUnit
	for i, x := range units[u] {
		if x == g {
			units[u] = append(units[u][:i], units[u][i+1:]...)
			break
		}
	}
	return nil
}

// Whole-region allocations: cuMemHostAlloc, cuMemAlloc, cuMemAllocManaged.

// wholeRegions is a provider whose every region is one driver allocation, committed at
// Reserve and freed at Release: it cannot align or decommit.
type wholeRegions struct {
	*cudaBase
	page  uintptr
	alloc func(size uintptr) (uintptr, error)
	free  func(addr uintptr) error
	op    string // the allocating call, for errors
}

func newWholeRegions(dev *cuda.Device, name string, kind Kind, op string,
	alloc func(uintptr) (uintptr, error), free func(uintptr) error) (wholeRegions, error) {
	b, err := newCUDABase(dev, name, kind)
	if err != nil {
		return wholeRegions{}, err
	}
	return wholeRegions{cudaBase: b, page: pageSize(), op: op, alloc: alloc, free: free}, nil
}

// Caps implements Provider.
func (w *wholeRegions) Caps() Caps { return Caps{Granule: w.page} }

// Reserve implements Provider: one allocation of size bytes (rounded up to the granule); the
// alignment is not honoured (Caps.Aligns is false: the arena's grid needs none).
func (w *wholeRegions) Reserve(size, _ uintptr) (*Region, error) {
	n, err := align.Up(size, w.page)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("%w: reserve %d bytes", ErrInvalid, size)
	}
	size = n
	addr, err := w.alloc(size)
	if err = w.call(&w.allocations, 1, err); err != nil {
		return nil, w.driverError(ErrReserve, w.op, size, err)
	}
	w.committed.Add(int64(size))
	return &Region{Base: addr, Size: size, Committed: true, Handle: w}, nil
}

// Commit implements Provider: regions are committed whole already.
func (w *wholeRegions) Commit(r *Region, off, size uintptr) error { return checkRange(r, off, size) }

// Decommit implements Provider: nothing can be given back short of Release.
func (w *wholeRegions) Decommit(r *Region, off, size uintptr) error { return checkRange(r, off, size) }

// Release implements Provider.
func (w *wholeRegions) Release(r *Region) error {
	if r == nil || r.Handle != w {
		return fmt.Errorf("%w: region not from this provider or already released", ErrInvalid)
	}
	if err := w.call(&w.allocations, -1, w.free(r.Base)); err != nil {
		return fmt.Errorf("%w: freeing %d bytes at %#x: %w", ErrInvalid, r.Size, r.Base, err)
	}
	w.committed.Add(-int64(r.Size))
	r.Handle = nil
	return nil
}

// CUDAHostAllocProvider hands out pinned host memory from cuMemHostAlloc, one allocation per
// region: the classic way, kept for comparison with CUDAHostProvider. Regions are committed
// whole and never decommitted, and their base is only page-aligned.
type CUDAHostAllocProvider struct {
	wholeRegions
}

// NewCUDAHostAlloc returns a provider of host memory from cuMemHostAlloc (portable, mapped).
func NewCUDAHostAlloc(dev *cuda.Device) (*CUDAHostAllocProvider, error) {
	const flags = cuda.HostAllocPortable | cuda.HostAllocDeviceMap
	w, err := newWholeRegions(dev, "cuda-hostalloc", HostPinned, "cuMemHostAlloc",
		func(n uintptr) (uintptr, error) { return dev.MemHostAlloc(n, flags) }, dev.MemFreeHost)
	if err != nil {
		return nil, err
	}
	return &CUDAHostAllocProvider{w}, nil
}

// Zero implements Zeroer, with the CPU.
func (p *CUDAHostAllocProvider) Zero(addr, size uintptr) error { return hostZero(addr, size) }

// DevicePointer returns the device address of host address addr in a region of this provider.
func (p *CUDAHostAllocProvider) DevicePointer(addr uintptr) (uintptr, error) {
	return p.devicePointer(addr)
}
