package ipcpool

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Owner is the process that owns a pool: it made the pool's memory (or adopted it from an
// owner before it), serves it on a Unix socket, lends grants and takes them back from the
// processes that give them back, leave or die. It is itself a Process of the pool (slot 0)
// and allocates like any other.
type Owner struct {
	*Process
	path     string
	ln       *net.UnixListener
	lock     *pathLock    // held while ln serves (pathlock.go)
	allow    map[int]bool // user ids that may attach
	timeout  time.Duration
	fileMode os.FileMode
	hello    hello // the template of every hello: slot and serial are each process's

	mu     sync.Mutex // the table, the slots, the fence, closed
	cond   *sync.Cond // on mu: memory came back, a slot was freed, a process left
	table  []grantState
	procs  []slotState
	noSlot map[*net.UnixConn]struct{} // sessions' connections with no slot: Close cuts them
	// unnamed holds, by the time it was accepted, each connection whose session has not yet
	// read what it is (an attach, or a rejoin naming a slot): the rejoins' deadline gives up
	// no slot while one accepted before it may still name it (expireRejoins).
	unnamed  map[*net.UnixConn]time.Time
	goneList []*gone
	ofGone   [][]int        // the round's grants of each process of goneList (grantsOfGone)
	pidfds   []unix.PollFd  // the round's poll of the processes gone that it watches (lookForExits)
	askedAt  map[int]uint64 // the last ask of each slot (table.go)
	epoch    uint64         // the fence epoch last published
	fenced   bool
	closed   bool
	done     chan struct{} // closed with closed: ends the waits for a scan that will not come
	wg       sync.WaitGroup
	watchEnd chan struct{} // closed to stop the watcher
	watched  chan struct{} // closed by the watcher as it ends

	// Adoption (adopt.go): what Serve was given, to build the owner from a donation.
	o        Options
	po       pinned.Options
	dev      *cuda.Device
	adoptMu  sync.Mutex // one adoption, or the fresh pool, at a time
	adopting bool       // the owner waits for the pool's memory: no process may attach yet
	rejoinBy time.Time  // the processes of the previous owner rejoin by then
	servedAt time.Time  // when the owner began to serve after waiting to adopt (zero: it did not wait)
	adoptEnd time.Time  // when the wait for a pool to adopt ends at the latest (awaitDonor)
	scan     *gone      // what an adoption left to scan (finishAdoption), or nil
	// unclaimed holds the grants the scan would free, or a rejoin did not claim, while a
	// process may still rejoin and claim them (claim.go); nil when none.
	unclaimed *gone
	suspect   bool          // the adoption found grant words naming no process: see rejoinsPending
	scanned   chan struct{} // closed once there is nothing to scan: the owner's retains may go
	// claiming counts the rejoins of this pool under way that connected before the rejoins'
	// deadline, their claims not decided yet: what the words hold back waits for them
	// (rejoinsPending), whatever slot they name.
	claiming int

	pauseDetach func() // set by tests only: runs as a session answers a detach, the slot left
	// rounds counts the watcher's rounds done: tests wait for rounds, not for time.
	rounds atomic.Uint64
	// refusedDonations counts the donations refused while the owner waited to adopt a pool
	// (SharedStats.RefusedDonations).
	refusedDonations atomic.Uint64
	// looked counts the entries dropRetains looked at (under mu): tests bound a round's work.
	looked int
}

// slotState is the owner's record of a slot.
type slotState struct {
	used   bool          // a process holds it (from the intro on)
	active bool          // it answered the hello: it may ask for grants
	serial uint64        // how many processes the slot has had: tells one from the next
	need   uint64        // the serial that must pass the current fence (0: none)
	conn   *net.UnixConn // its connection (nil: the owner's own slot)
	rejoin bool          // a process of the previous owner, not rejoined yet (adopt.go)
	// rejoining counts the rejoins naming the slot under way that connected before the
	// rejoins' deadline: the slot is not given up at it while one is (expireRejoins).
	rejoining int
	// keeper: not nil while the slot is kept, not used yet taken by no process: that process,
	// gone from it alive, still holds something in it, until it exits (leave.go).
	keeper *gone
}

// Serve creates a pool of o.Size bytes of locked memory on memfds (or CUDA host granules:
// Options.VMM) and serves it on a Unix socket at path. A socket file left there by an owner
// that died is replaced; one another owner serves, or starts on, is not: Serve fails with
// ErrServed (which matches syscall.EADDRINUSE too). The owner holds a lock file beside the
// socket, path with ".lock" appended, while it serves. A path the system refuses (a folder
// that is missing or not writable, a file that is no socket there) fails with ErrRefused, and
// so does memory the system or the CUDA driver refuses to make, map, lock or register (a
// memfd, its mapping, an mlock refused for another reason than the memlock limit, which is
// ErrMemlock, a registration, VMM granules), the cause (an errno, the driver's error) kept.
func Serve(path string, o Options) (*Owner, error) {
	retryStrays()
	l, err := o.layout()
	if err != nil {
		return nil, err
	}
	po, err := poolOptions(o.Pool)
	if err != nil {
		return nil, err
	}
	if o.Adopt < 0 {
		return nil, fmt.Errorf("%w: Adopt %v", ErrInvalidOptions, o.Adopt)
	}
	dev, err := openDevice(&po)
	if err != nil {
		return nil, err
	}
	if o.VMM && dev == nil {
		return nil, fmt.Errorf("%w: a VMM pool needs Options.Pool.Backend CUDAHost (or Auto, with a driver)", ErrInvalidOptions)
	}
	w := newOwner(path, o, l)
	w.o, w.po, w.dev = o, po, dev
	if o.Adopt > 0 {
		adopted, err := w.awaitDonor(o.Adopt)
		if err != nil {
			closeDevice(dev)
			return nil, err
		}
		if adopted {
			return w, nil
		}
	}
	w.adoptMu.Lock()
	if w.Process != nil { // adopted as the wait ended
		w.adoptMu.Unlock()
		return w, nil
	}
	err = w.fresh()
	if err != nil {
		// No pool, and none adopted from now on: a rejoin's session waiting for the adoption's
		// lock (donated) ends, and so may the wait for the sessions below.
		w.mu.Lock()
		w.closed = true
		close(w.done)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	w.adoptMu.Unlock()
	if err != nil {
		if w.ln != nil {
			w.closeListener()
			w.mu.Lock()
			for c := range w.noSlot { // no answer of theirs is needed, as at Close
				c.Close()
			}
			w.mu.Unlock()
			w.wg.Wait()
		}
		closeDevice(dev)
		return nil, err
	}
	return w, nil
}

// fresh makes a new pool and serves it.
func (w *Owner) fresh() error {
	var id [8]byte
	rand.Read(id[:]) // (never fails: it ends the program instead, from Go 1.24)
	l := w.hello.layout
	w.hello = hello{pool: binary.LittleEndian.Uint64(id[:]) | 1, slot: 0, serial: 1, layout: l, ctlSize: l.ctlBytes(), vmm: w.o.VMM, epoch: 1}
	sp, err := w.makeSpace(w.o, w.dev)
	if err != nil {
		return err
	}
	c := sp.ctl()
	c.writeHeader(w.hello.pool, boolWord(w.o.VMM))
	c.store(hOwnerPid, uint64(os.Getpid()))
	c.store(hOwnerEpoch, 1)
	return w.start(sp)
}

func boolWord(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// newOwner makes an owner's bookkeeping, serving nothing yet.
func newOwner(path string, o Options, l layout) *Owner {
	w := &Owner{path: path, allow: map[int]bool{os.Getuid(): true}, timeout: o.Timeout, fileMode: o.Mode,
		table: make([]grantState, l.grants()), procs: make([]slotState, l.slots), hello: hello{layout: l},
		noSlot: map[*net.UnixConn]struct{}{}, unnamed: map[*net.UnixConn]time.Time{}}
	if w.timeout <= 0 {
		w.timeout = DefaultTimeout
	}
	for _, u := range o.AllowUIDs {
		w.allow[u] = true
	}
	w.cond = sync.NewCond(&w.mu)
	w.scanned = make(chan struct{})
	w.done = make(chan struct{})
	return w
}

// makeSpace makes the pool's memory and maps it, locked, in the owner.
func (w *Owner) makeSpace(o Options, dev *cuda.Device) (*space, error) {
	l := w.hello.layout
	ctlFd, err := newMemfd("pinmalloc-ipcpool-ctl", w.hello.ctlSize)
	if err != nil {
		return nil, err
	}
	fds := []int{ctlFd}
	cfg := spaceConfig{mode: lockNow, fallback: o.FallbackPageable, dev: dev, vmm: o.VMM}
	if o.VMM {
		rfds, exports, err := newVMMRegions(dev, l)
		fds = append(fds, rfds...)
		if err != nil {
			// What the driver refuses to release stays with the package, retried later.
			return nil, abandon(&space{fds: fds, unreleased: exports}, dev, err)
		}
		cfg.exports = exports
	} else {
		for i := range l.regions {
			fd, err := newMemfd(fmt.Sprintf("pinmalloc-ipcpool-%d", i), l.regionSize)
			if err != nil {
				closeFds(fds)
				return nil, err
			}
			fds = append(fds, fd)
		}
	}
	return mapSpace(l, w.hello.ctlSize, fds, cfg)
}

// start makes the owner's own process over sp (slot 0) and serves.
func (w *Owner) start(sp *space) error {
	w.procs[0] = slotState{used: true, active: true, serial: w.hello.serial}
	c := sp.ctl()
	c.slotStore(0, sSerial, w.hello.serial)
	c.slotStore(0, sPid, uint64(os.Getpid()))
	c.slotStore(0, sStart, startTime(os.Getpid()))
	p, err := newProcess(w.hello, sp, ownerGranter{w, w.timeout}, processConfig{pool: w.po, drain: w.o.DrainInterval, dev: w.dev})
	if err != nil {
		return abandon(sp, w.dev, err)
	}
	if w.ln == nil {
		if w.ln, w.lock, err = listen(w.path, w.mode()); err != nil {
			_ = p.closePool(true)
			return abandon(sp, w.dev, err)
		}
		w.wg.Add(1)
		go w.serve()
	}
	w.mu.Lock()
	w.Process, p.owner = p, w
	if w.adopting {
		w.servedAt = time.Now()
		w.adopting = false
		w.moveDeadlines()
	}
	close(w.scanned) // a new pool: nothing to scan
	w.cond.Broadcast()
	w.mu.Unlock()
	w.run(p)
	return nil
}

// run starts the owner's own process's drainer and the owner's watcher.
func (w *Owner) run(p *Process) {
	p.start()
	w.watchEnd, w.watched = make(chan struct{}), make(chan struct{})
	go w.watch(p.every)
}

func (w *Owner) mode() os.FileMode { return w.fileMode }

// listenPause, set by tests only, runs as listen has found a socket file nobody serves,
// before it replaces it.
var listenPause func()

// listened, set by tests only, runs as listen has bound the socket at path, before it opens it
// to its mode.
var listened func(path string)

// listen listens on path with the given permissions, replacing a socket file nobody serves,
// under the path's lock, which it returns held.
func listen(path string, mode os.FileMode) (_ *net.UnixListener, _ *pathLock, err error) {
	if mode == 0 {
		mode = 0o600
	}
	lock, err := lockPath(path)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			lock.unlock()
		}
	}()
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil { // an owner that takes no lock (an older version)
			c.Close()
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrServed, path, syscall.EADDRINUSE)
		}
		if listenPause != nil {
			listenPause()
		}
		_ = os.Remove(path) // a stale socket of an owner that died
	}
	// Create the socket with no permission for anyone, then open it to mode: no window in
	// which another user could connect.
	old := unix.Umask(0o777)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrRefused, err) // (the error names the path)
	}
	ln.SetUnlinkOnClose(true)
	if listened != nil {
		listened(path)
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("%w: opening the socket to mode %#o: %w", ErrRefused, mode.Perm(), err)
	}
	return ln, lock, nil
}

// closeListener stops serving: the socket goes, then the path's lock.
func (w *Owner) closeListener() {
	w.ln.Close()
	w.lock.unlock()
}

// serve accepts connections until the listener closes.
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
		// Registered now, not when its session runs (however late): Close cuts it, and the
		// rejoins' deadline waits for it (unnamed).
		start := time.Now()
		w.mu.Lock()
		closed := w.closed
		if !closed {
			w.noSlot[c] = struct{}{}
			w.unnamed[c] = start
		}
		w.mu.Unlock()
		if closed {
			c.Close() // accepted as Close began: it would not be cut
			continue
		}
		w.wg.Add(1)
		go w.session(c, start)
	}
}

// Attached returns how many processes other than the owner are attached.
func (w *Owner) Attached() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for s := 1; s < len(w.procs); s++ {
		if w.procs[s].used {
			n++
		}
	}
	return n
}

// waitCounted, set by tests only, runs as Wait has counted the processes attached, before it
// waits for one to leave (with w.mu held).
var waitCounted func()

// Wait waits until no process but the owner is attached, or ctx is done.
func (w *Owner) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	// Counted and waited for under one hold of w.mu: a process that leaves after the count
	// broadcasts only once Wait waits (leave), and a context done after it likewise.
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if n := w.attachedLocked(); n == 0 {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("%w: %d: %w", ErrAttached, n, ctx.Err())
		}
		if waitCounted != nil {
			waitCounted()
		}
		w.cond.Wait()
	}
}

// Close closes the pool. It refuses with ErrAttached, naming the count and releasing nothing,
// while other processes are attached (Wait waits for them). Otherwise it stops serving,
// removes the socket, and unmaps and frees the pool's memory; the owner's own buffers still
// live are given up with it (an error wrapping pinned.ErrLiveBlocks says how many). Memory
// the CUDA driver refuses to give back is kept for the next Close, as Process.Close says, and
// while a stream of the owner's CUDA context captures a CUDA graph, Close releases nothing and
// returns an error matching cuda.ErrCapturing, as Process.Close does.
func (w *Owner) Close() error {
	defer retryStrays()
	// refused answers a Close that may not go on, with w.mu held: unlocked when it does.
	refused := func() (bool, error) {
		if w.closed {
			w.mu.Unlock()
			return true, w.Process.leaveAgain()
		}
		if n := w.attachedLocked(); n > 0 {
			w.mu.Unlock()
			return true, fmt.Errorf("%w: %d processes", ErrAttached, n)
		}
		return false, nil
	}
	w.mu.Lock()
	if ok, err := refused(); ok {
		return err
	}
	w.mu.Unlock()
	if err := w.Process.captureRefusal(); err != nil { // a synchronize: not under w.mu
		return err
	}
	w.mu.Lock()
	if ok, err := refused(); ok { // another Close, or a process, came meanwhile
		return err
	}
	w.closed = true // no session takes a slot from now on
	close(w.done)
	w.cond.Broadcast()
	w.mu.Unlock()
	w.closeListener()
	w.mu.Lock()
	for s := range w.procs { // a process that connected between the check and the close
		if c := w.procs[s].conn; c != nil {
			c.Close()
		}
	}
	for c := range w.noSlot { // no answer of theirs is needed: no waiting for them
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
	w.stopWatch()
	err := w.Process.leaveAll(nil)
	w.mu.Lock()
	for _, g := range w.goneList {
		g.watch.stop()
	}
	w.goneList = nil
	w.mu.Unlock()
	return err
}

func (w *Owner) attachedLocked() int {
	n := 0
	for s := 1; s < len(w.procs); s++ {
		if w.procs[s].used {
			n++
		}
	}
	return n
}

// openDevice opens the CUDA device a process's pool registers with, as its Backend says
// (Auto: CUDAHost where a driver and the device are, Locked otherwise); nil for Locked. CUDAHost
// where there is no driver or no such device is ErrInvalidOptions; the driver's refusal of the
// device otherwise, ErrRefused.
func openDevice(po *pinned.Options) (*cuda.Device, error) {
	if po.Backend == pinned.Locked {
		return nil, nil
	}
	dev, err := cuda.Open(po.Device)
	if err != nil {
		if po.Backend == pinned.Auto {
			po.Backend = pinned.Locked
			return nil, nil
		}
		sentinel := ErrRefused // the driver refused
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			sentinel = ErrInvalidOptions // the backend cannot work here
		}
		return nil, fmt.Errorf("%w: the %s backend: %w", sentinel, pinned.CUDAHost, err)
	}
	po.Backend = pinned.CUDAHost
	return dev, nil
}
