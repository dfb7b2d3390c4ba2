package ipcpool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// watch is how the owner learns that a process gone from its socket has exited (until then it
// may still write the memory it held): its pidfd or, where none could be opened (the owner out
// of descriptors, a kernel without pidfd_open), its pid and start time, read again from /proc.
type watch struct {
	pidfd int    // -1: none
	pid   int    // with pidfd -1: the process watched through /proc (0: none, it has exited)
	start uint64 // its start time (startTime), against the pid's reuse
}

// pidfdOpen is pidfd_open(2) (tests make it fail).
var pidfdOpen = unix.PidfdOpen

// watchSelf, set by tests only, makes the owner watch its own process as any other: a process
// attached from within it that leaves alive then keeps what it holds until the test ends.
var watchSelf bool

// watchProcess watches process pid. A process that has exited already is taken to have
// exited, and so is this process: an attach from within the owner's own process (as tests
// do) is taken to be gone with its connection, it never exits before the owner.
func watchProcess(pid int) watch {
	if pid <= 0 || pid == os.Getpid() && !watchSelf {
		return watch{pidfd: -1}
	}
	fd, err := pidfdOpen(pid, 0)
	switch {
	case err == nil:
		return watch{pidfd: fd}
	case errors.Is(err, unix.ESRCH):
		return watch{pidfd: -1}
	}
	if start := startTime(pid); start != 0 {
		return watch{pidfd: -1, pid: pid, start: start}
	}
	return watch{pidfd: -1} // no /proc entry: gone
}

// none reports whether nothing is watched: the process has exited.
func (wa *watch) none() bool { return wa.pidfd < 0 && wa.pid == 0 }

// exitedByProc reports whether the process watched without a pidfd has exited: its pid is
// gone from /proc or names another process (lookForExits polls the pidfds, all at once).
func (wa *watch) exitedByProc() bool {
	return wa.pid <= 0 || startTime(wa.pid) != wa.start
}

// stop ends the watch: it is known to have exited (or need not be watched any more).
func (wa *watch) stop() {
	if wa.pidfd >= 0 {
		unix.Close(wa.pidfd)
	}
	*wa = watch{pidfd: -1}
}

// lookForExits marks the processes of goneList that have exited since the last round: those it
// watches by pidfd with one poll(2) of them all, not one each (16 processes left alive: a
// third of the round's 28 µs, BenchmarkOwnerRound), the others through /proc. A poll that
// fails (EINTR) marks none this round. Called with w.mu held.
func (w *Owner) lookForExits() {
	fds := w.pidfds[:0]
	for _, g := range w.goneList {
		if !g.exited && g.watch.pidfd >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(g.watch.pidfd), Events: unix.POLLIN})
		}
	}
	w.pidfds = fds
	polled := len(fds) > 0
	if polled {
		n, err := unix.Poll(fds, 0)
		polled = err == nil && n > 0
	}
	i := 0
	for _, g := range w.goneList {
		exited := false
		switch {
		case g.exited:
			continue
		case g.watch.pidfd >= 0:
			exited = polled && fds[i].Revents != 0 // any event, POLLNVAL too
			i++
		default:
			exited = g.watch.exitedByProc()
		}
		if exited {
			g.exited = true
			g.watch.stop()
		}
	}
}
