package shared

// The owner's side of one attached process: its connection, and how the owner learns that it
// has gone (session, awaitExit).

import (
	"errors"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

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
			err = errDetached // answered once its memory is back and its slot free (below)
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
	if errors.Is(err, errDetached) {
		// Only now: a Detach that has returned is no longer attached (a Close right after it
		// succeeds, Attached no longer counts it).
		_ = reply(c, stOK, 0)
	}
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
