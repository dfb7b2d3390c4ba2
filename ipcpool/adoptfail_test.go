package ipcpool

import (
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// An adoption that fails as it builds the owner's process (newProcess: a pinned.New that
// refuses) leaves nothing of the donor's pool behind: when no other donor comes, the pool Serve
// makes has the Options' geometry, as Options.Adopt says (the other options' geometry is the
// adopted pool's only when a pool is adopted). (adopt installed the donor's tables, slots and
// layout before newProcess and left them when it failed: the new pool took the donor's Size
// and Slots.)
func TestFailedAdoptionKeepsTheOptionsGeometry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	// The donor's pool: 6 MiB and 2 slots, where the Options say 4 MiB and DefaultSlots.
	l := layout{regions: 3, regionSize: 2 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	const pool = 77
	fds := memfds(t, l.ctlBytes(), l.regionSize, l.regionSize, l.regionSize)
	base, err := mapCtl(fds[0], l.ctlBytes())
	must(t, "map", err)
	t.Cleanup(func() { _ = unmap(base, l.ctlBytes()) })
	c := newCtl(l, words(base, l.ctlBytes()))
	c.writeHeader(pool, 0)
	c.slotStore(1, sSerial, 1)
	var refused atomic.Bool
	newProcessFails = func(h hello) error {
		if h.pool != pool {
			return nil // the new pool's
		}
		refused.Store(true)
		return errors.New("the test refuses the adopted pool's process")
	}
	t.Cleanup(func() { newProcessFails = nil }) // after the owner's Close
	o := Options{Size: 4 << 20, Adopt: 2 * time.Second, Timeout: time.Second, FallbackPageable: true}
	want, err := o.layout()
	must(t, "layout", err)
	served := make(chan *Owner, 1)
	go func() {
		w, err := Serve(path, o)
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	var w *Owner
	t.Cleanup(func() {
		if w == nil {
			w = <-served
		}
		if w != nil {
			must(t, "owner Close", w.Close())
		}
	})
	conn := donateTo(t, path, pool, fds)
	if m, err := readMsg(conn); err == nil {
		t.Fatalf("the owner adopted a pool whose process it could not build: it answered %+v", m)
	}
	if w = <-served; w == nil {
		t.FailNow()
	}
	if !refused.Load() {
		t.Fatal("the owner never built the adopted pool's process")
	}
	ps := w.SharedStats().Pool
	if w.ID() == pool || ps.Size != int(want.poolBytes()) || w.Process.slots != want.slots || len(w.procs) != want.slots ||
		len(w.table) != want.grants() {
		t.Fatalf("after an adoption that failed, the new pool %x has %d bytes, %d slots (%d in the owner's table, "+
			"%d grants): want the Options' %d bytes and %d slots (%d grants), not the donor's %d and %d",
			w.ID(), ps.Size, w.Process.slots, len(w.procs), len(w.table), want.poolBytes(), want.slots, want.grants(),
			l.poolBytes(), l.slots)
	}
}

// Serve that fails to make its pool after waiting for one to adopt returns its error, even
// when a process of the previous owner came to rejoin meanwhile, and that process is cut off,
// not asked for the pool's descriptors: nothing is adopted once Serve failed. (Serve held the
// adoption's lock as it waited for its sessions to end, and the rejoin's session waited for
// that lock to ask for the descriptors: Serve never returned.)
func TestServeFailingAfterTheAdoptWaitReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	started := make(chan struct{}, 1)
	sessionStarts = func() {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	refused := errors.New("the test refuses the new pool's process")
	var conn *net.UnixConn
	newProcessFails = func(hello) error {
		// The wait to adopt is over, and Serve makes a new pool: a rejoin comes now.
		var err error
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return err
		}
		if err := writeMsg(conn, msg{op: opIntro, flags: introRejoin, seq: wireVersion, a: ctlMagic, b: 77}, time.Second); err != nil {
			return err
		}
		if err := writeMsg(conn, msg{op: opRejoin, a: 1, b: 1}, time.Second); err != nil {
			return err
		}
		<-started // accepted: Serve's end waits for its session
		return refused
	}
	t.Cleanup(func() { sessionStarts, newProcessFails = nil, nil })
	served := make(chan error, 1)
	go func() {
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: 100 * time.Millisecond, Timeout: time.Second, FallbackPageable: true})
		if w != nil {
			_ = w.Close()
		}
		served <- err
	}()
	select {
	case err := <-served:
		if conn == nil || !errors.Is(err, refused) {
			t.Fatalf("Serve whose new pool failed: %v (rejoin connected: %v), want the failure", err, conn != nil)
		}
		defer conn.Close()
		// Nor is the rejoin asked for the pool: an owner that serves nothing would adopt it.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if m, err := readMsg(conn); err == nil {
			t.Fatalf("the rejoin, after Serve failed, was answered %+v: want it cut off", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve whose new pool failed, a rejoin waiting to donate the pool, has not returned in 20s")
	}
}

// Serve that fails to make its pool after waiting for one to adopt returns its error at once,
// even while a process that connected during the wait says nothing: nothing needs its answer
// any more, as at Close. (Serve waited for that session to reach its handshake's deadline,
// Options.Timeout, before it returned.)
func TestServeFailingCutsASilentConnection(t *testing.T) {
	const timeout = 10 * time.Second
	path := filepath.Join(t.TempDir(), "pool.sock")
	started := make(chan struct{}, 1)
	sessionStarts = func() {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	refused := errors.New("the test refuses the new pool's process")
	var failedAt time.Time
	newProcessFails = func(hello) error {
		<-started // the silent connection's session runs: Serve's end waits for it
		failedAt = time.Now()
		return refused
	}
	t.Cleanup(func() { sessionStarts, newProcessFails = nil, nil })
	type result struct {
		err error
		at  time.Time
	}
	served := make(chan result, 1)
	go func() {
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: 300 * time.Millisecond, Timeout: timeout, FallbackPageable: true})
		if w != nil {
			_ = w.Close()
		}
		served <- result{err, time.Now()}
	}()
	var conn *net.UnixConn
	waitFor(t, func() bool {
		var err error
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		return err == nil
	})
	defer conn.Close() // silent until then
	r := <-served
	if !errors.Is(r.err, refused) {
		t.Fatalf("Serve whose new pool failed: %v, want the failure", r.err)
	}
	if d := r.at.Sub(failedAt); d > timeout/2 {
		t.Fatalf("Serve whose new pool failed returned %v after the failure, a connection silent: "+
			"want it at once, not at the connection's deadline (Options.Timeout %v)", d, timeout)
	}
}
