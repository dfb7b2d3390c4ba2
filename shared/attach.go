package shared

// Attaching to a pool another process serves (Attach), and leaving it (Process.Detach).

import (
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// AttachOptions configures an attached process.
type AttachOptions struct {
	// Align is every buffer's alignment in this process's heap (default 64).
	Align uintptr
	// DrainInterval is how often the process takes in others' frees of its buffers (default
	// DefaultDrainInterval).
	DrainInterval time.Duration
	// Device, when set, registers every region with this process's CUDA context, as
	// Options.Device does for the owner.
	Device *cuda.Device
	// FallbackPageable is Options.FallbackPageable for this process.
	FallbackPageable bool
}

// Attach connects to the pool served at path and maps it: the regions are mapped shared and
// locked as their pages are touched (mlock2 MLOCK_ONFAULT: the owner's pages are already
// resident and locked, nothing is copied or pinned again, so attaching costs a few system
// calls whatever the pool's size). The process then allocates from a heap of its own.
func Attach(path string, o AttachOptions) (*Process, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	h, fds, err := recvHello(conn, 1+maxRegions)
	if err != nil {
		conn.Close()
		return nil, err
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd) // the mappings keep the memory
		}
	}()
	for i, fd := range fds {
		size := h.ctlSize
		if i > 0 {
			size = h.regionSize
		}
		if i > 0 && h.backend == VMM {
			break // the driver's descriptors: cuMemImportFromShareableHandle checks them
		}
		if err := checkMemfd(fd, size); err != nil {
			conn.Close()
			return nil, err
		}
	}
	cg := &connGranter{c: conn}
	cfg := procConfig{mode: lockOnFault, align: o.Align, dev: o.Device, fallback: o.FallbackPageable, backend: h.backend}
	p, err := newProcess(h, fds[0], fds[1:], cfg, o.DrainInterval, cg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if p.c.load(hMagic) != ctlMagic || p.c.load(hPool) != h.pool {
		p.abandon()
		conn.Close()
		return nil, fmt.Errorf("%w: control region does not match the hello", ErrProtocol)
	}
	p.leave = cg.detach
	if cred, err := peerCred(conn); err == nil { // the owner, to notice its exit (see free)
		if fd, err := unix.PidfdOpen(int(cred.Pid), 0); err == nil {
			p.ownerFd = fd
		}
	}
	return p, nil
}

// connGranter asks the owner for grants over the socket.
type connGranter struct {
	mu sync.Mutex
	c  *net.UnixConn
}

func (g *connGranter) grant(n int) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, v, err := request(g.c, opGrant, uint64(n))
	if err != nil {
		return 0, err
	}
	if st != stOK {
		return 0, fmt.Errorf("%w: %d grants asked", ErrPoolFull, n)
	}
	return int(v), nil
}

func (g *connGranter) release(first, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, _, err := request(g.c, opRelease, uint64(first)<<32|uint64(n))
	if err != nil {
		return err
	}
	if st != stOK {
		return fmt.Errorf("%w: release of grants %d+%d refused", ErrProtocol, first, n)
	}
	return nil
}

// detach tells the owner this process leaves (it takes back whatever the process still
// holds) and closes the socket.
func (g *connGranter) detach() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _, err := request(g.c, opDetach, 0)
	g.c.Close()
	return err
}

// Detach leaves the pool: with a Device, it first synchronizes the process's CUDA context, so
// that no copy queued here still uses the memory; then the process's memory goes back to the
// owner (buffers still live with it: their handles go stale) and every mapping is removed.
// Buffers of the pool must not be used in this process afterwards. When it returns, the owner
// has taken the memory back and no longer counts the process (Owner.Attached), so the owner's
// Close may follow at once.
func (p *Process) Detach() error { return p.shutdown() }
