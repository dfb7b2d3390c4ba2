package ipcpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Attach connects to the pool served at path and maps it: the regions are mapped shared and
// locked as their pages are touched (mlock2 MLOCK_ONFAULT: the owner's pages are resident
// and locked already, nothing is copied or pinned again, so attaching costs a few system
// calls whatever the pool's size). The process then allocates from a pinned.Pool of its own
// over grants of the pool.
//
// Attach first checks who serves the socket (SO_PEERCRED): a server whose user is not in
// AttachOptions.ServerUIDs (default: this process's user and root) is refused with
// ErrRefused before anything is sent or mapped. The owner refuses, with ErrRefused too, a
// process whose pid it cannot see (one outside the owner's pid namespace): it could not tell
// when the process exits. ctx bounds the whole of it, and so does AttachOptions.Timeout from
// the connection on: a stopped owner makes Attach fail with an error matching
// context.DeadlineExceeded, and so does an owner that gave the process up for taking longer
// than the owner's Options.Timeout (a timeout, not ErrRefused). Memory the system or the CUDA
// driver refuses to map, lock or register fails with ErrRefused too (ErrMemlock for the memlock
// limit), the cause (an errno, the driver's error) kept. An Attach
// that fails after connecting tells the owner, whose slot for it is free at once. One that
// fails after mapping the pool gives the mapping back; what the CUDA driver refuses to give
// back (a registration, a VMM mapping or imported granules) stays with the package, its device
// open, and goes at a later Attach, Serve or Close: the error says what stays.
func Attach(ctx context.Context, path string, o AttachOptions) (*Process, error) {
	return attach(ctx, path, o, lockOnFault)
}

// dialed, when set (tests), runs as soon as Attach has connected to the owner; readyPause
// runs as Attach is about to send its ready.
var (
	dialed     func()
	readyPause func()
)

// attach is Attach, mapping the pool locked as mode says (a keeper locks it all).
func attach(ctx context.Context, path string, o AttachOptions, mode lockMode) (*Process, error) {
	retryStrays()
	po, err := poolOptions(o.Pool)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// The process's one-time membarrier registration (the pool's fast paths; it waits for an
	// RCU grace period: seconds on a busy machine) is paid before the owner counts its Timeout.
	fence.Available()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if dialed != nil {
		dialed()
	}
	conn := nc.(*net.UnixConn)
	p, err := handshake(ctx, conn, path, po, o, timeout, mode)
	if err != nil {
		conn.Close()
		switch {
		case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		case errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded) // a step past the timeout
		}
		return nil, err
	}
	return p, nil
}

// handshake checks the server, reads the hello, maps the pool and builds the process.
func handshake(ctx context.Context, conn *net.UnixConn, path string, po pinned.Options, o AttachOptions, timeout time.Duration, mode lockMode) (*Process, error) {
	if err := checkServer(conn, o.ServerUIDs); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeMsg(conn, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	h, fds, err := recvHello(conn)
	if err != nil {
		return nil, err
	}
	abort := func(err error) (*Process, error) {
		// Tell the owner, and wait for it to hang up: its slot for this process is free then.
		if writeMsg(conn, msg{op: opAbort}, timeout) == nil {
			_ = conn.SetReadDeadline(time.Now().Add(timeout))
			_, _ = io.Copy(io.Discard, conn)
		}
		return nil, err
	}
	dev, err := openDevice(&po)
	if err != nil {
		closeFds(fds)
		return abort(err)
	}
	sp, err := mapSpace(h.layout, h.ctlSize, fds, spaceConfig{mode: mode, fallback: o.FallbackPageable, dev: dev, vmm: h.vmm})
	if err != nil {
		closeDevice(dev)
		return abort(err)
	}
	c := sp.ctl()
	if !c.matches(h.pool, h.layout, boolWord(h.vmm)) || c.slotLoad(h.slot, sSerial) != h.serial {
		err := abandon(sp, dev, fmt.Errorf("%w: the control region does not match the hello", ErrProtocol))
		closeDevice(dev)
		return abort(err)
	}
	cl := newClient(conn, path, timeout, o.ServerUIDs, h)
	p, err := newProcess(h, sp, cl, processConfig{pool: po, drain: o.DrainInterval, dev: dev})
	if err != nil {
		err = abandon(sp, dev, err)
		closeDevice(dev)
		return abort(err)
	}
	p.cl = cl
	cl.donate = sp.donate
	var flags uint64
	if dev != nil {
		flags = flagDevice
	}
	if readyPause != nil {
		readyPause()
	}
	err = readyAnswer(conn, writeMsg(conn, msg{op: opReady, a: flags}, 0))
	if err != nil { // the owner gave the process up, or refused it: nothing was granted
		p.start() // leaveAll stops it
		_ = p.leaveAll(nil)
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	cl.start()
	p.start()
	return p, nil
}

// readyAnswer reads the owner's answer to the ready whose write returned werr, and returns
// nil when the process is attached. A ready the owner took too late (past its
// Options.Timeout), or one this process's deadline ended first, is a timeout: an error
// matching context.DeadlineExceeded (as attach says), never ErrRefused. The answer is read
// even when the write failed: an owner that gave the process up says so before it hangs up.
func readyAnswer(conn *net.UnixConn, werr error) error {
	if errors.Is(werr, os.ErrDeadlineExceeded) {
		return fmt.Errorf("ipcpool: sending ready: %w", werr)
	}
	ack, err := readMsg(conn)
	switch {
	case err == nil && ack.op == opReply && ack.a == stOK && werr == nil:
		return nil
	case err == nil && ack.op == opReply && ack.a == stRefused && ack.b == refusedLate:
		return errGivenUp
	case err == nil:
		return fmt.Errorf("%w: the owner answered ready with %d (status %d)", ErrProtocol, ack.op, ack.a)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("ipcpool: waiting for the answer to ready: %w", err)
	case werr != nil:
		return fmt.Errorf("%w: sending ready: %w", ErrRefused, werr)
	}
	return fmt.Errorf("%w: the owner hung up at the ready: %w", ErrRefused, err)
}

// errGivenUp is the owner's answer to a process whose handshake took longer than its
// Options.Timeout (at the ready, or before the hello while the owner made its pool): a
// timeout, no refusal.
var errGivenUp = fmt.Errorf("ipcpool: the owner gave the process up, its handshake longer than the owner's Options.Timeout: %w",
	context.DeadlineExceeded)

// checkServer refuses a server whose user is not one uids allows (default: this process's
// user and root).
func checkServer(conn *net.UnixConn, uids []int) error {
	cred, err := peerCred(conn)
	if err != nil {
		return fmt.Errorf("%w: reading the server's credentials: %w", ErrRefused, err)
	}
	if uids == nil {
		uids = []int{os.Getuid(), 0}
	}
	if !slices.Contains(uids, int(cred.Uid)) {
		return fmt.Errorf("%w: the pool is served by user %d (pid %d), not one of %v", ErrRefused, cred.Uid, cred.Pid, uids)
	}
	return nil
}

// recvHello reads the owner's answer to the intro: the hello and its descriptors, or a
// refusal.
func recvHello(conn *net.UnixConn) (hello, []int, error) {
	b := make([]byte, 8*helloWords)
	n, fds, err := recvFds(conn, b, 1+maxRegions)
	if errors.Is(err, os.ErrDeadlineExceeded) { // this process's deadline, or its context's end: no refusal
		return hello{}, nil, fmt.Errorf("ipcpool: waiting for the pool's hello: %w", err)
	}
	if err != nil {
		return hello{}, nil, fmt.Errorf("%w: reading the pool's hello: %w", ErrRefused, err)
	}
	if n == msgSize {
		closeFds(fds)
		m, err := decodeMsg(b[:n])
		if err != nil || m.op != opReply || m.a != stRefused {
			return hello{}, nil, fmt.Errorf("%w: an answer that is no hello", ErrProtocol)
		}
		if m.b == refusedLate {
			return hello{}, nil, errGivenUp
		}
		why := map[uint64]string{refusedUser: "this user may not attach", refusedFull: "no slot free (Options.Slots), or the pool is closing",
			refusedKind: "not served now",
			refusedPid:  "the owner cannot see this process's pid (another pid namespace)"}[m.b]
		return hello{}, nil, fmt.Errorf("%w: the owner refused: %s", ErrRefused, why)
	}
	if n == 0 {
		closeFds(fds)
		return hello{}, nil, fmt.Errorf("%w: the owner closed the connection", ErrRefused)
	}
	h, err := decodeHello(b[:n])
	if err == nil && len(fds) != 1+h.regions {
		err = fmt.Errorf("%w: %d descriptors for %d regions", ErrProtocol, len(fds), h.regions)
	}
	if err != nil {
		closeFds(fds)
		return hello{}, nil, err
	}
	return h, fds, nil
}

// Close leaves the pool: it waits for the work queued in the process's CUDA context, lets go
// its retains, closes its pool (its grants go back) and tells the owner, once nothing of the
// process can touch the pool's memory any more. Buffers still live are given up (an error
// wrapping pinned.ErrLiveBlocks says how many; those shared with others live on while they
// retain them): they must not be used afterwards, and they read and write memory of their own
// if they are, never the pool's. When Close returns, the owner has taken the memory back and
// no longer counts the process. Memory the CUDA driver refuses to give back (a registration,
// a VMM mapping) stays registered and mapped in this process, the device open, and Close
// reports the driver's error: the next Close gives it back, and returns ErrClosed once
// nothing is left. Until then, a kept region of a memfd pool is inaccessible (a late use of a
// buffer in it, given up or freed before, faults), its grants back with the owner; in a VMM
// pool the driver's mapping is left as it is, the pool's memory still, so the process's grants
// stay its own, lent to no other process, until it exits (the next Close does not give them
// back sooner). While a
// stream of the process's CUDA context captures a CUDA graph, the driver refuses to synchronize
// the context (in every capture mode, invalidating the capture): Close then leaves nothing and
// returns an error matching cuda.ErrCapturing; Close again once the capture has ended.
func (p *Process) Close() error {
	defer retryStrays()
	if p.owner != nil {
		return p.owner.Close()
	}
	if err := p.captureRefusal(); err != nil {
		return err
	}
	err := p.leaveAll(p.cl.detach)
	if err == ErrClosed { // closed, or being closed, by another Close: its connection is that one's
		return err
	}
	p.cl.close()
	return err
}
