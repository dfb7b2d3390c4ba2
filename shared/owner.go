package shared

// The owner of a shared pool: Serve, its accept loop, and how it waits for the attached
// processes and closes. Its side of each process is in session.go, its grant table in grants.go.

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

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

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

// Detach on the owner is Close: the owner cannot leave the pool it serves.
func (w *Owner) Detach() error { return w.Close() }
