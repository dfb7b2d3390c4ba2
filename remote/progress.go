package remote

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// The progress goroutine.
//
// One goroutine per worker calls ucp_worker_progress, under the worker's mutex, and hands what
// UCX's callbacks queued (completions, messages, connection requests, endpoint failures) to
// the transfers and connections they belong to. What may call into a pool (a transfer's end
// releases its holds, which may free buffers) runs after the mutex is let go: a pool's arena
// calls a Registration under its own lock, so the worker's mutex is never held while a pool's
// lock is taken.
//
// While operations are in flight it keeps progressing, yielding the processor between rounds
// (spinMax at most without progress). Idle, it arms the worker (ucp_worker_arm) and sleeps on
// the worker's event fd, a dup of which is registered with the Go runtime's poller, so the
// goroutine parks and no thread is held; a call that posts work while it sleeps wakes it with
// ucp_worker_signal. It wakes every idleTick anyway while connections are open, so UCX's
// keepalive, which runs inside progress, notices a peer that died without a word.

const (
	spinMax  = time.Millisecond
	idleTick = 100 * time.Millisecond
	rounds   = 8  // ucp_worker_progress calls per cgo call, fewer once one makes no progress
	drainMax = 64 // rounds at most that drain a dead peer's last messages (watch.go)
)

func (w *Worker) loop() {
	defer close(w.loopDone)
	lastWork := time.Now()
	for {
		w.mu.Lock()
		if p := w.paused; p != nil { // tests: no progress until p is closed
			w.mu.Unlock()
			<-p
			continue
		}
		worked := w.round()
		if len(w.exited) > 0 {
			w.abandonExited()
			worked = true
		}
		w.closeWaiting()
		w.postAnswers()
		w.postQueued()
		w.sendForgets()
		now := time.Now()
		w.expirePending(now)
		w.expireAnswers(now)
		finished := w.finished
		w.finished = nil
		unheld, rel := w.takeUnheld(), w.takeUnholds()
		busy := len(w.free)+w.zombies < len(w.slots)
		if w.closing && !busy && len(w.queue) == 0 && unheld == nil {
			w.mu.Unlock()
			w.finish(finished)
			w.releaseHolds(rel)
			return
		}
		now = time.Now()
		if worked = worked || unheld != nil; worked {
			lastWork = now
		}
		sleep := !worked && (!busy || now.Sub(lastWork) > spinMax)
		if sleep {
			w.uw.DropSpares() // idle: the buffers kept for data messages streaming in go back
			w.sleeping.Store(true)
			if again, err := w.uw.Arm(); again || err != nil {
				w.sleeping.Store(false)
				sleep = false
			}
		}
		conns := len(w.conns) + len(w.pending)
		w.mu.Unlock()
		w.finish(finished)
		w.releaseHolds(rel)
		if unheld != nil {
			w.holdAnswers(unheld) // the answers' buffers held out of mu, then posted
		}
		if !sleep {
			if !worked {
				runtime.Gosched()
			}
			continue
		}
		tick := time.Second
		if conns > 0 || busy {
			tick = idleTick
		}
		w.wake.wait(tick)
		w.sleeping.Store(false)
		w.stats.wakeups.Add(1)
		lastWork = time.Now()
	}
}

// round calls UCX's progress and hands on everything its callbacks queued, ucx.EventBatch
// events at a time; it says whether anything happened. The callbacks queue every data message
// UCX delivers (none may be dropped: its sender waits for the answer), so progress is called
// only once the queue is empty, and stops once a batch is queued (ucx.Worker.Progress): the
// queue holds at most what one call of ucp_worker_progress receives, however fast a peer
// sends, and the rest waits in UCX's transports, where it pushes back on the sender. Under mu.
func (w *Worker) round() (worked bool) {
	n, progressed := w.uw.Progress(rounds, w.cq)
	w.complete(w.cq[:n])
	took := 0
	for {
		w.events = w.uw.Events(w.events[:0], ucx.EventBatch)
		for i := range w.events {
			w.handle(&w.events[i])
			w.events[i] = ucx.Event{}
		}
		if took += len(w.events); len(w.events) < ucx.EventBatch {
			break
		}
	}
	w.sendAcks()
	return n > 0 || progressed || took > 0
}

// complete hands each completion to what it belongs to. Under mu.
func (w *Worker) complete(cq []ucx.Completion) {
	for _, c := range cq {
		s := w.slots[c.Slot]
		if s.held {
			s.lr.held--
			w.slots[c.Slot].held = false
		}
		switch s.kind {
		case slotOp:
			w.sent(c.Slot, c.Status)
			continue // the operation's end frees the slot
		case slotMsg:
			if s.c != nil {
				s.c.inflight--
			}
			if s.done != nil {
				s.done <- w.statusErr(s.c, c.Status)
			}
		case slotAnswer:
			s.c.inflight--
			w.unhold(s.hold)
		case slotClose:
			w.reap(s.c)
		case slotZombie:
			w.zombies--
			w.unhold(s.hold)
			w.unshare(s.shared)
		}
		w.freeSlot(c.Slot)
	}
}

// statusErr is the error of an operation of connection c that ended with status st (0: nil).
func (w *Worker) statusErr(c *Conn, st int32) error {
	switch st {
	case 0:
		return nil
	case stRefused:
		return fmt.Errorf("%w: the peer refused the descriptor: no region of its own holds that range (forged, or its region is gone)", ErrDescriptor)
	case stMemType:
		return fmt.Errorf("%w: the peer's buffer is device memory, which a message cannot reach", ErrNotSupported)
	case stTruncated:
		return fmt.Errorf("%w: the peer answered with a truncated message, or its bytes could not be fetched", ErrProtocol)
	case stBusy:
		return fmt.Errorf("%w: the peer had no room to receive (its Options.MaxInFlight is below this worker's)", ErrBusy)
	}
	if c != nil && c.err != nil {
		// The connection ended: that is why (its own error wraps UCX's status where UCX
		// said the peer failed); the operation's status, the end's consequence (canceled by
		// the forced close, or stEnded), would say it again, or say a local close was the
		// peer's reset.
		return c.err
	}
	if st == stEnded {
		return fmt.Errorf("%w: the connection ended", ErrClosed)
	}
	s := ucx.Status(st)
	if s.PeerGone() || st == -16 { // gone, or canceled by a forced close
		return wrap(ErrPeer, s)
	}
	return wrap(ErrUCX, s)
}

// finish ends the transfers that completed: their holds are released (which may free buffers
// into their pools), then their waiters woken. Not under mu.
func (w *Worker) finish(ts []*Transfer) {
	for _, t := range ts {
		t.end(w)
	}
}

// handle acts on one event of the callbacks. Under mu.
func (w *Worker) handle(e *ucx.Event) {
	switch e.Kind {
	case ucx.EventConn:
		w.connRequest(ucx.ConnRequest(e.Handle), e.Tag)
	case ucx.EventMessage:
		if e.Oversize || e.Dropped {
			w.oversize(e.Data, e.Len, e.Dropped)
		} else {
			w.message(ucx.Ep(e.Handle), e.Data)
		}
	case ucx.EventData:
		w.data(e)
	case ucx.EventEpError:
		ep := ucx.Ep(e.Handle)
		if c := w.byEp[ep]; c != nil {
			w.failConn(c, wrap(ErrPeer, e.Status))
		} else if _, ok := w.pending[ep]; ok {
			delete(w.pending, ep)
			w.closeEp(ep, nil, true)
		}
	}
}

// closeEp closes ep (force: at once; UCX allows it only on failure-handling endpoints) and,
// when c is not nil, reaps c once it is closed. A close that finds every control slot in flight
// (peers that read nothing keep their messages' there) waits for one (closeWaiting): dropped,
// it left the endpoint open and c in the worker's table for good. Under mu.
func (w *Worker) closeEp(ep ucx.Ep, c *Conn, force bool) {
	if pc := (pendingClose{ep: ep, c: c, force: force}); !w.startClose(pc) {
		w.unclosed = append(w.unclosed, pc)
	}
}

// startClose closes pc's endpoint on a control slot, and reaps its connection once it is
// closed; it reports false when every control slot is in flight (nothing done). Under mu.
func (w *Worker) startClose(pc pendingClose) bool {
	i, ok := w.takeSlot(slotClose, pc.c)
	if !ok {
		return false
	}
	w.slots[i].c = pc.c
	if inflight, _ := w.uw.CloseEp(pc.ep, pc.force, i); !inflight {
		w.freeSlot(i)
		w.reap(pc.c)
	}
	return true
}

// pendingClose is an endpoint close waiting for a control slot (closeEp).
type pendingClose struct {
	ep    ucx.Ep
	c     *Conn
	force bool
}

// closeWaiting makes the endpoint closes that waited for a control slot, in order, while slots
// are free. By the progress goroutine, under mu; the worker's Close destroys the endpoints left.
func (w *Worker) closeWaiting() {
	n := 0
	for n < len(w.unclosed) && w.startClose(w.unclosed[n]) {
		n++
	}
	if n > 0 {
		k := copy(w.unclosed, w.unclosed[n:])
		clear(w.unclosed[k:])
		w.unclosed = w.unclosed[:k]
	}
}

// waiter sleeps on the worker's event fd through the runtime's poller.
type waiter struct {
	f  *os.File
	rc syscall.RawConn
}

func newWaiter(fd int) (*waiter, error) {
	d, err := unix.Dup(fd) // the worker owns fd: os.File closes its own copy
	if err != nil {
		return nil, fmt.Errorf("dup of the worker's event fd: %w", err)
	}
	if err := unix.SetNonblock(d, true); err != nil {
		_ = unix.Close(d)
		return nil, err
	}
	f := os.NewFile(uintptr(d), "ucx-worker-event-fd")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &waiter{f: f, rc: rc}, nil
}

// wait returns once the fd is readable, or after d.
func (wt *waiter) wait(d time.Duration) {
	_ = wt.f.SetReadDeadline(time.Now().Add(d))
	first := true
	err := wt.rc.Read(func(uintptr) bool {
		if first { // wait for readiness once, then return
			first = false
			return false
		}
		return true
	})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		time.Sleep(time.Millisecond) // not pollable after all: poll
	}
}

func (wt *waiter) close() error { return wt.f.Close() }
