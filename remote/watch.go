package remote

import (
	"fmt"
	"hash/fnv"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Peers without UCX's failure handling (Options.SharedMemory).
//
// UCX 1.13's shared-memory transports (posix, sysv) serve only endpoints without peer failure
// handling, and such an endpoint never reports that its peer died. A worker with SharedMemory
// watches each peer process of its host itself: the handshake carries each side's pid and an
// id of its host and pid namespace (hostID), and a peer with this worker's id is watched
// through a pidfd (pidfd_open), registered with the Go runtime's poller, which becomes readable
// when the process exits. The progress goroutine then drains what UCX holds (the peer's last
// messages are received, so that Recv returns them first) and abandons the connection: its
// operations in flight end with ErrPeer at once, and its endpoint is never closed (a close
// waits for a peer that will never answer, and a forced close is UCX's only for
// failure-handling endpoints): UCX's requests on it stay as zombie slots, freed if UCX ever
// completes them, each holding the local buffer UCX may still read or write for it (an
// answer's, a put's, a get's: zombie) until then, or until the worker's Close, and the
// endpoint, its keys and its requests go with the worker. A peer on another host cannot be
// watched so: a transfer to it that dies waits until its context ends. The pid and host id
// are the peer's word (doc.go): a peer that names another process is watched as that process,
// which costs it its own connection, not another's.

var (
	hostOnce sync.Once
	hostVal  uint64
)

// hostID identifies this host's boot and this process's pid namespace: two processes with the
// same id can name each other by pid.
func hostID() uint64 {
	hostOnce.Do(func() {
		h := fnv.New64a()
		boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		ns, _ := os.Readlink("/proc/self/ns/pid")
		h.Write(boot)
		h.Write([]byte(ns))
		hostVal = h.Sum64() | 1
	})
	return hostVal
}

// watch watches the process of c's peer when the worker has no UCX failure handling and the
// peer shares its host and pid namespace. Under mu.
func (w *Worker) watch(c *Conn, pid uint32, host uint64) {
	if !w.opts.SharedMemory || pid == 0 || host != hostID() {
		return
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		w.logf("remote: cannot watch peer process %d (%v): its death will not be seen", pid, err)
		return
	}
	_ = unix.SetNonblock(fd, true) // so that os.NewFile registers it with the poller
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd-%d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return
	}
	c.watcher, c.pid = f, pid
	w.watchers.Add(1)
	go func() {
		defer w.watchers.Done()
		first := true
		err := rc.Read(func(uintptr) bool { // readable once the process has exited
			if first {
				first = false
				return false
			}
			return true
		})
		if err != nil {
			// The pidfd closed by reap fails the read with the poller's "use of closed
			// file", which is not os.ErrClosed: the connection ended otherwise.
			w.mu.Lock()
			ended := c.reaped
			w.mu.Unlock()
			if !ended {
				w.logf("remote: cannot watch peer process %d (%v): its death will not be seen", pid, err)
			}
			return
		}
		w.mu.Lock()
		w.peerExited(c)
		w.mu.Unlock()
	}()
}

// peerExited queues c, whose peer process has exited, to be abandoned by the progress
// goroutine. Under mu.
func (w *Worker) peerExited(c *Conn) {
	if c.state == connFailed || c.exited {
		return
	}
	if w.abandonAtOnce {
		w.abandonConn(c, fmt.Errorf("%w: peer process %d exited", ErrPeer, c.pid))
		return
	}
	c.exited = true
	w.exited = append(w.exited, c)
	w.signal()
}

// abandonExited abandons the connections whose peer process has exited, once progress finds
// nothing more in the worker: what the peer sent before it died (a message is complete for
// its sender once it lies in this process's shared-memory FIFO) is received first, so its
// Recv returns those messages, then ErrPeer. Under mu, by the progress goroutine.
func (w *Worker) abandonExited() {
	for i := 0; i < drainMax && w.round(); i++ {
	}
	for _, c := range w.exited {
		if c.state != connFailed {
			w.abandonConn(c, fmt.Errorf("%w: peer process %d exited", ErrPeer, c.pid))
		}
	}
	clear(w.exited)
	w.exited = w.exited[:0]
}

// abandonConn ends c, whose peer is gone, without a word to UCX: its operations in flight end
// now with err, their slots kept as zombies until UCX completes them, if ever. Under mu.
func (w *Worker) abandonConn(c *Conn, err error) {
	c.abandoned = true
	w.abandoned = true
	w.failConn(c, err)
}

// abandonEnded abandons c, which failed before the worker's Close (with SharedMemory): its
// operations, messages and answers UCX still holds (a peer that stalls keeps them there, and
// the close of c's endpoint, not forced, waits for them) become zombie slots, as an abandoned
// connection's do, and so does that close, or it is never made; c is reaped. The Close then
// waits for none of them. Under mu, by Close.
func (w *Worker) abandonEnded(c *Conn) {
	if c.abandoned || c.reaped {
		return
	}
	c.abandoned, w.abandoned = true, true
	w.abandonSlots(c)
	lanes := lanesUnknown
	for i := range w.slots {
		if s := &w.slots[i]; s.kind == slotClose && s.c == c {
			w.zombie(uint32(i), localHold{}, nil, &lanes)
		}
	}
	unclosed := w.unclosed[:0]
	for _, pc := range w.unclosed {
		if pc.c != c {
			unclosed = append(unclosed, pc)
		}
	}
	clear(w.unclosed[len(unclosed):])
	w.unclosed = unclosed
	w.reap(c)
}

// abandonSlots ends the operations of c in flight, keeping the slots UCX still holds as
// zombies, each with the hold of the local buffer UCX may still read or write for it: an
// answer's, and a transfer's put's or get's, whose transfer ends now for its user (its error
// c.err) without its buffer. Every one of them is counted in c.inflight: a connection with
// none in flight is abandoned without a look at every slot. Under mu.
func (w *Worker) abandonSlots(c *Conn) {
	if c.inflight == 0 {
		return
	}
	lanes := lanesUnknown // c's, asked once (zombie)
	w.scanned += len(w.slots)
	for i := range w.slots {
		s := &w.slots[i]
		if s.c != c {
			continue
		}
		switch s.kind {
		case slotOp:
			s.remote = false
			if s.status == 0 {
				s.status = stEnded // the error is c.err (statusErr)
			}
			if !s.sending {
				w.endOp(uint32(i))
				continue
			}
			t, lr, st, n := s.t, s.lr, s.status, s.n
			h, sh := t.zombieHold(s)
			w.zombie(uint32(i), h, sh, &lanes)
			w.opDone(t, lr, st, n, 0)
		case slotMsg:
			if s.done != nil {
				s.done <- c.err
			}
			c.inflight--
			w.zombie(uint32(i), localHold{}, nil, &lanes)
		case slotAnswer:
			c.inflight--
			w.zombie(uint32(i), s.hold, nil, &lanes)
		}
	}
}

// What cpuLanes says of an endpoint, asked at most once per abandoned connection (zombie).
const (
	lanesUnknown uint8 = iota
	lanesNIC           // a lane of a transport that may read or write memory on its own
	lanesCPU           // cpuLanes
)

// cpuLanes reports whether every lane of an endpoint, as ucp_ep_print_info describes it, is on
// a transport that reads or writes a local buffer only inside a call on the worker: tcp
// (sendmsg, and recv into the buffer), self, and shared memory (posix, sysv: a copy into the
// peer's FIFO, or out of this worker's; cma and knem carry only rendezvous, which neither a
// data message nor UCX 1.13's puts and gets emulated with messages take). These are
// allocOnly's transports. Another (an RDMA NIC's) may read or write it on its own, its
// hardware's DMA and retransmissions, while UCX's worker lives.
func cpuLanes(info string) bool {
	lanes := epLane.FindAllStringSubmatch(info, -1)
	for _, m := range lanes {
		if !allocOnly[m[1]] {
			return false
		}
	}
	return len(lanes) > 0
}

// zombie keeps slot i, whose operation has ended for this worker, until UCX completes it, with
// hold: the hold of the local buffer UCX may still read or write for it (abandonSlots), or the
// zero Hold, or sh: its share of the hold of a put by message's buffer, which the slots of its
// parts share (unshare). The hold is released when UCX completes the operation (complete), or
// by the worker's Close once it has made its last call on UCX's worker where the endpoint's
// lanes touch the buffer only inside such a call (cpuLanes; zombieHolds): on an RDMA lane it
// stays held, so the buffer is never handed out again while a NIC may touch it. lanes caches
// what cpuLanes says of the slot's endpoint (lanesUnknown, lanesNIC, lanesCPU). Under mu.
func (w *Worker) zombie(i uint32, hold localHold, sh *sharedHold, lanes *uint8) {
	s := w.slots[i]
	s.dataEnded()
	cpu := false
	if hold != (localHold{}) || sh != nil {
		if *lanes == lanesUnknown {
			*lanes = lanesNIC
			if info, err := w.uw.EpInfo(s.c.ep); err == nil && cpuLanes(info) {
				*lanes = lanesCPU
			}
		}
		cpu = *lanes == lanesCPU
	}
	w.uw.DisarmReply(i) // its transfer ends now: no answer may land in its buffer
	if s.timed {
		w.untimeAnswer(i) // its connection has failed: no timeout to check
	}
	w.count(&s, -1)
	w.slots[i] = slot{kind: slotZombie, gen: s.gen, lr: s.lr, held: s.held, hold: hold, shared: sh,
		cpuOnly: cpu}
	w.zombies++
}
