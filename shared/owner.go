package shared

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Limits and defaults of Options.
const (
	maxRegions = 64
	maxSlots   = 256
	// DefaultSlots is how many processes (the owner included) may be attached at once when
	// Options.Slots is zero.
	DefaultSlots = 16
	// DefaultRingSize is the entries of each remote-free ring when Options.RingSize is zero.
	DefaultRingSize = 4096
	grantUnit       = 2 << 20
)

// Options configures a shared pool (Serve).
type Options struct {
	// Size is the pool's memory in bytes, locked by the owner at Serve. Required; rounded up
	// to the grant size.
	Size uintptr
	// GrantSize is the unit in which processes take memory of the pool for their heaps: a
	// multiple of 2 MiB. Default: Size/64 rounded up to a power of two, at least 2 MiB. A
	// process holds at most 64 grants, so a smaller grant suits many small processes, a
	// larger one few big ones.
	GrantSize uintptr
	// RegionSize is the size of each memfd the pool is made of, a multiple of GrantSize and
	// at most MaxRegistration. Default min(Size, MaxRegistration).
	RegionSize uintptr
	// Slots is how many processes, the owner included, may be attached at once (default
	// DefaultSlots, at most 256).
	Slots int
	// RingSize is the capacity, in frees, of each ring carrying one process's frees of
	// another's buffers (default DefaultRingSize). A free waits while its ring is full.
	RingSize int
	// Align is every buffer's alignment in the owner's heap (heap.Options.Align), 16 B to
	// 32 KiB, 64 by default.
	Align uintptr
	// Mode is the socket file's permission bits (default 0600: the owner's user only).
	Mode os.FileMode
	// AllowUIDs are user ids allowed to attach besides the owner's own; root (0) is allowed
	// only when listed or when the owner is root. A peer's id comes from SO_PEERCRED.
	AllowUIDs []int
	// DrainInterval is how often the owner takes in the frees others made of its buffers
	// (default DefaultDrainInterval).
	DrainInterval time.Duration
	// Backend is the kind of memory the pool is made of: Locked (memfds, the default) or VMM
	// (exportable CUDA host granules; needs Device, here and in every attached process).
	Backend Backend
	// Device, when set, registers every region with the owner's CUDA context
	// (cuMemHostRegister, portable and device-mapped), one registration per region, so that
	// copies to and from the pool run by DMA. Each attached process registers the regions with
	// its own context (AttachOptions.Device).
	Device *cuda.Device
	// MaxRegistration caps a region, and so one registration (default
	// DefaultMaxRegistration, 64 GiB); a bigger pool is made of several regions. A buffer
	// never crosses a region, so no copy spans two registrations.
	MaxRegistration uintptr
	// FallbackPageable, when set, keeps a region the owner cannot lock (the memlock limit) or
	// register (the driver refused) mapped as it is, pageable or unregistered, rather than
	// failing; Stats.PageableRegions says which and why. Copies from pageable memory run at
	// a fraction of the bandwidth.
	FallbackPageable bool
}

// Owner is the process that owns a shared pool: it made the pool's memory, serves it on a
// Unix socket and takes memory back from processes that leave or die. It is itself a
// Process of the pool (slot 0) and allocates like any other.
type Owner struct {
	*Process
	path   string
	ln     *net.UnixListener
	ctlFd  int
	fds    []int
	allow  map[int]bool // user ids that may attach
	hello  hello
	mu     sync.Mutex // the grant table's writer; slots
	cond   *sync.Cond
	used   []bool   // slots taken
	serial []uint64 // each slot's attach count: tells a process from the next in its slot
	// The fence (see reclaim): its epoch, the last published, and for each slot the serial of
	// the process that must pass it (0: none); fenced says grants wait for it.
	epoch  uint64
	need   []uint64
	fenced bool
	conns  map[*net.UnixConn]bool
	gen    uint64 // the last generation handed out
	closed bool
	wg     sync.WaitGroup
}

// Serve creates a pool of o.Size bytes of locked memory on memfds and serves it on a Unix
// socket at path. A socket file left there by an owner that died is replaced; one another
// owner serves is not (an error wrapping EADDRINUSE).
func Serve(path string, o Options) (*Owner, error) {
	l, err := o.layout()
	if err != nil {
		return nil, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("shared: pool id: %w", err)
	}
	w := &Owner{path: path, ctlFd: -1, allow: map[int]bool{os.Getuid(): true}, used: make([]bool, l.slots),
		serial: make([]uint64, l.slots), need: make([]uint64, l.slots), conns: map[*net.UnixConn]bool{}}
	w.cond = sync.NewCond(&w.mu)
	for _, u := range o.AllowUIDs {
		w.allow[u] = true
	}
	w.hello = hello{pool: binary.LittleEndian.Uint64(id[:]) | 1, layout: l}
	w.hello.ctlSize = (uintptr(8*l.words()) + pageSize - 1) &^ (pageSize - 1)
	fail := func(err error) (*Owner, error) {
		w.closeFds()
		return nil, err
	}
	if w.ctlFd, err = newMemfd("pinmalloc-shared-ctl", w.hello.ctlSize); err != nil {
		return fail(err)
	}
	cfg := procConfig{mode: lockNow, align: o.Align, dev: o.Device, fallback: o.FallbackPageable, backend: o.Backend}
	switch o.Backend {
	case Locked:
		for i := 0; i < l.regions; i++ {
			fd, err := newMemfd(fmt.Sprintf("pinmalloc-shared-%d", i), l.regionSize)
			if err != nil {
				return fail(err)
			}
			w.fds = append(w.fds, fd)
		}
	case VMM:
		d, err := icuda.Of(o.Device)
		if err != nil {
			return fail(fmt.Errorf("%w: the VMM backend needs Options.Device: %w", ErrInvalidOptions, err))
		}
		fds, hs, err := newVMMRegions(d, l)
		w.fds = fds
		if err != nil {
			for _, h := range hs {
				_ = d.MemRelease(h)
			}
			return fail(err)
		}
		cfg.handles = hs
	default:
		return fail(fmt.Errorf("%w: backend %d", ErrInvalidOptions, o.Backend))
	}
	w.hello.backend = o.Backend
	w.used[0], w.serial[0] = true, 1
	w.Process, err = newProcess(w.hello, w.ctlFd, w.fds, cfg, o.DrainInterval, ownerGranter{w})
	if err != nil {
		return fail(err)
	}
	w.Process.leave = func() error { w.reclaim(0); return nil }
	c := &w.Process.c
	for i, v := range []uint64{ctlMagic, ctlVersion, w.hello.pool, uint64(l.regions), uint64(l.regionSize),
		uint64(l.grantSize), uint64(l.slots), uint64(l.ringCap)} {
		c.store(i, v)
	}
	if w.ln, err = listen(path, o.Mode); err != nil {
		w.Process.abandon()
		return fail(err)
	}
	w.wg.Add(1)
	go w.serve()
	return w, nil
}

// layout checks the options and returns the pool's geometry.
func (o Options) layout() (layout, error) {
	if o.Size == 0 || o.Size > 1<<44 {
		return layout{}, fmt.Errorf("%w: size %d (want 1 byte to 16 TiB)", ErrInvalidOptions, o.Size)
	}
	g := o.GrantSize
	if g == 0 {
		g = grantUnit
		for g < o.Size/64 {
			g <<= 1
		}
	}
	if g%grantUnit != 0 {
		return layout{}, fmt.Errorf("%w: grant size %d is not a multiple of 2 MiB", ErrInvalidOptions, g)
	}
	size := (o.Size + g - 1) / g * g
	maxReg := o.MaxRegistration
	if maxReg == 0 {
		maxReg = DefaultMaxRegistration
	}
	rs := o.RegionSize
	if rs == 0 {
		rs = min(size, maxReg/g*g)
	}
	if rs > maxReg {
		return layout{}, fmt.Errorf("%w: region size %d above the registration cap %d", ErrInvalidOptions, rs, maxReg)
	}
	if rs == 0 || rs%g != 0 {
		return layout{}, fmt.Errorf("%w: region size %d is not a multiple of the grant size %d", ErrInvalidOptions, rs, g)
	}
	size = (size + rs - 1) / rs * rs
	l := layout{regions: int(size / rs), regionSize: rs, grantSize: g, slots: o.Slots, ringCap: o.RingSize}
	if l.slots == 0 {
		l.slots = DefaultSlots
	}
	if l.ringCap == 0 {
		l.ringCap = DefaultRingSize
	}
	if l.regions > maxRegions || l.slots < 1 || l.slots > maxSlots || l.ringCap < 1 || l.ringCap > 1<<20 {
		return layout{}, fmt.Errorf("%w: %d regions (at most %d), %d slots (1 to %d), ring of %d (1 to 1Mi)",
			ErrInvalidOptions, l.regions, maxRegions, l.slots, maxSlots, l.ringCap)
	}
	return l, nil
}

// listen listens on path with the given permissions, replacing a socket file nobody serves.
func listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if mode == 0 {
		mode = 0o600
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			// Someone serves it. Leave as a detach, so that the server takes the slot back at
			// once rather than when this process exits.
			_, _, _ = request(c, opDetach, 0)
			c.Close()
			return nil, fmt.Errorf("shared: %s: another pool serves it: %w", path, syscall.EADDRINUSE)
		}
		_ = os.Remove(path) // a stale socket of an owner that died
	}
	// Create the socket with no permission for anyone, then open it to mode: no window in
	// which another user could connect.
	old := unix.Umask(0o777)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("shared: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode.Perm()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("shared: chmod socket: %w", err)
	}
	return ln, nil
}

func (w *Owner) closeFds() {
	if w.ctlFd >= 0 {
		unix.Close(w.ctlFd)
		w.ctlFd = -1
	}
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.fds = nil
}

// serve accepts processes until the listener closes.
func (w *Owner) serve() {
	defer w.wg.Done()
	for {
		c, err := w.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: let it pass
			continue
		}
		w.wg.Add(1)
		go w.session(c)
	}
}

// session serves one attached process, and takes its memory back when its socket closes.
func (w *Owner) session(c *net.UnixConn) {
	defer w.wg.Done()
	defer c.Close()
	cred, err := peerCred(c)
	w.mu.Lock()
	if err != nil || !w.allow[int(cred.Uid)] {
		w.mu.Unlock()
		return // refused: the peer reads EOF
	}
	slot := -1
	for i, u := range w.used {
		if !u && !w.closed {
			slot = i
			w.used[i] = true
			w.serial[i]++
			break
		}
	}
	if slot >= 0 {
		w.conns[c] = true
	}
	w.mu.Unlock()
	if slot < 0 {
		return
	}
	// A pidfd of the peer: when its socket closes without a detach, its memory comes back
	// only once it has exited (see awaitExit).
	pidfd, perr := unix.PidfdOpen(int(cred.Pid), 0)
	if perr != nil {
		pidfd = -1
	} else {
		defer unix.Close(pidfd)
	}
	h := w.hello
	h.slot = slot
	_, _, err = c.WriteMsgUnix(h.encode(), unix.UnixRights(append([]int{w.ctlFd}, w.fds...)...), nil)
	for err == nil {
		var op, arg uint64
		if op, arg, err = readRequest(c); err != nil {
			break
		}
		switch op {
		case opGrant:
			first, gerr := w.grant(slot, int(arg))
			if gerr != nil {
				err = reply(c, stFull, 0)
			} else {
				err = reply(c, stOK, uint64(first))
			}
		case opRelease:
			if w.release(slot, int(arg>>32), int(arg&0xffffffff)) != nil {
				err = reply(c, stBad, 0)
			} else {
				err = reply(c, stOK, 0)
			}
		case opDetach:
			_ = reply(c, stOK, 0)
			err = errDetached
		default:
			err = ErrProtocol
		}
	}
	// The process detached, died, or broke the protocol: its memory comes back, once nothing
	// of the process can touch it any more. (When Close cut it off, nothing is handed out
	// again: the memory stays alive for as long as the process maps it, the kernel's or the
	// driver's reference, and the owner waits for no one.)
	w.mu.Lock()
	closing := w.closed
	w.mu.Unlock()
	if !errors.Is(err, errDetached) && int(cred.Pid) != os.Getpid() && !closing {
		awaitExit(pidfd)
	}
	w.reclaim(slot)
	w.mu.Lock()
	w.used[slot] = false
	delete(w.conns, c)
	w.cond.Broadcast()
	w.mu.Unlock()
}

var errDetached = errors.New("detached")

// awaitExit waits until the process of pidfd has exited: its mappings are gone then, and so
// are its file descriptors, the CUDA driver's among them (the driver tears down the process's
// contexts, and the work queued on their streams, as those close). A socket that closes
// without a detach may be a process that is dying (SIGKILL closes its files one by one) or
// one that closed the socket and lives on with the pool mapped: either way its memory may
// still be written, so it is not taken back before. Without a pidfd (a kernel before 5.3) it
// returns at once.
func awaitExit(pidfd int) {
	if pidfd < 0 {
		return
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

// grant gives slot n contiguous free grants of one region, of a new generation. Fenced
// grants are not free yet: while every process has not passed their fence, a request they
// alone could satisfy fails with ErrPoolFull.
func (w *Owner) grant(slot, n int) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	per := c.grantsPerRegion()
	if n <= 0 || n > per {
		return 0, fmt.Errorf("%w: %d grants", ErrPoolFull, n)
	}
	w.unfence()
	for r := 0; r < c.regions; r++ {
		run := 0
		for i := r * per; i < (r+1)*per; i++ {
			if v := c.load(c.grantWord(i)); v&grantFenced != 0 || unpackSlot(v) >= 0 {
				run = 0
				continue
			}
			if run++; run == n {
				first := i - n + 1
				w.gen++
				for g := first; g <= i; g++ {
					c.store(c.grantWord(g), packGrant(w.gen, slot))
				}
				return first, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: no %d contiguous free grants", ErrPoolFull, n)
}

// release takes back grants [first, first+n) from slot, which must hold them.
func (w *Owner) release(slot, first, n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	if first < 0 || n <= 0 || first+n > c.grants() {
		return ErrProtocol
	}
	for g := first; g < first+n; g++ {
		if _, s := c.grant(g); s != slot {
			return ErrProtocol
		}
	}
	w.gen++
	for g := first; g < first+n; g++ {
		c.store(c.grantWord(g), packGrant(w.gen, -1))
	}
	return nil
}

// reclaim takes back every grant slot holds: those of a process that died, or left buffers
// behind. Other processes may still have copies queued on their streams into those buffers
// (they got them by handle), so the grants are fenced: they are handed out again only once
// every process attached now has passed the fence (its drainer synchronized its CUDA context
// after the epoch was published; see Process.passFence) or has left.
func (w *Owner) reclaim(slot int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &w.Process.c
	w.gen++
	n := 0
	for g := 0; g < c.grants(); g++ {
		if _, s := c.grant(g); s == slot {
			c.store(c.grantWord(g), packGrant(w.gen, -1)|grantFenced)
			n++
		}
	}
	if n == 0 {
		return
	}
	// One fence for every fenced grant: a process that passes this epoch passed the earlier.
	w.epoch++
	w.fenced = true
	for i, u := range w.used {
		w.need[i] = 0
		if u && i != slot {
			w.need[i] = w.serial[i]
		}
	}
	c.store(hFence, w.epoch)
}

// unfence frees the fenced grants once every process that had to pass the fence has passed it
// or left its slot. Called with w.mu held.
func (w *Owner) unfence() {
	if !w.fenced {
		return
	}
	c := &w.Process.c
	for i, s := range w.need {
		if s != 0 && w.used[i] && w.serial[i] == s && c.load(c.fenceWord(i)) < w.epoch {
			return
		}
	}
	for g := 0; g < c.grants(); g++ {
		if v := c.load(c.grantWord(g)); v&grantFenced != 0 {
			c.store(c.grantWord(g), v&^grantFenced)
		}
	}
	w.fenced = false
}

// Attached returns how many processes other than the owner are attached.
func (w *Owner) Attached() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conns)
}

// Wait waits until no process but the owner is attached, or ctx is done.
func (w *Owner) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.conns) > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %d: %w", ErrAttached, len(w.conns), ctx.Err())
		}
		w.cond.Wait()
	}
	return nil
}

// Close closes the pool. It refuses with ErrAttached, naming the count and releasing nothing,
// while other processes are attached (Wait waits for them). Otherwise it stops serving,
// removes the socket, and unmaps and frees the pool's memory; the owner's own buffers still
// live are given up with it (Stats before Close tells how many).
func (w *Owner) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if n := len(w.conns); n > 0 {
		w.mu.Unlock()
		return fmt.Errorf("%w: %d processes", ErrAttached, n)
	}
	w.closed = true // no session takes a slot from now on
	w.mu.Unlock()
	w.ln.Close()
	w.mu.Lock()
	for c := range w.conns { // a process that attached between the check and the close
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
	err := w.Process.shutdown()
	w.closeFds()
	return err
}

// ownerGranter is the owner's own granter: the server, called in process.
type ownerGranter struct{ w *Owner }

func (g ownerGranter) grant(n int) (int, error)   { return g.w.grant(0, n) }
func (g ownerGranter) release(first, n int) error { return g.w.release(0, first, n) }

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
// Buffers of the pool must not be used in this process afterwards.
func (p *Process) Detach() error { return p.shutdown() }

// Detach on the owner is Close: the owner cannot leave the pool it serves.
func (w *Owner) Detach() error { return w.Close() }
