package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestRegionsForgottenOverLife: a connection that learns more than maxRegionsPerConn regions of
// its peer over its life, never more than one or two at once (the peer registers its pool anew,
// described and put to, then closes the registration, over and over: a pool's regions mapped and
// released), keeps working. The bound counted every region the connection ever saw and forgot
// none: the put after the 4,096th region was refused with ErrDescriptor, for good.
func TestRegionsForgottenOverLife(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w1, _, r1, r2, c1, c2 := connectedPair(t, ctx)
	b1, b2 := liveBuffer(t, r1, 4096), liveBuffer(t, r2, 4096)
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := c2.w
	most := 0
	for i := range maxRegionsPerConn + 64 {
		r, err := w2.Register(r2.pool)
		if err != nil {
			t.Fatal(err)
		}
		d := describe(t, r, b2)
		if err := c1.Put(ctx, b1, d); err != nil {
			t.Fatalf("put %d, into region %d: %v", i, d.region, err)
		}
		w1.mu.Lock()
		most = max(most, len(c1.rkeys))
		w1.mu.Unlock()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for { // the last forget on its way
		w1.mu.Lock()
		n := len(c1.rkeys)
		w1.mu.Unlock()
		if n == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the connection still knows %d regions its peer deregistered", n)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d regions over the connection's life, %d known at once at most", maxRegionsPerConn+64, most)
	if most > 8 {
		t.Errorf("the connection knew %d regions at once, its peer never more than 1 live", most)
	}
}

// forgetBody is a msgForget of ids for connection dst, as the peer sends it.
func forgetMsg(dst uint64, ids ...uint32) []byte {
	return appendForget(header(msgForget, dst, 4*len(ids)), ids)
}

// TestForgedForget: a peer's forget can only make a connection forget what the peer described
// on it. A forget of regions the connection never learned changes nothing; one of a region still
// live at the peer is harmless (the next descriptor of it is learned again, and the put lands);
// a malformed one fails the connection with ErrProtocol.
func TestForgedForget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, _, r1, r2, c1, _ := connectedPair(t, ctx)
	b1, b2 := liveBuffer(t, r1, 4096), liveBuffer(t, r2, 4096)
	d := describe(t, r2, b2)
	if err := c1.Put(ctx, b1, d); err != nil {
		t.Fatal(err)
	}
	known := func() int {
		w1.mu.Lock()
		defer w1.mu.Unlock()
		return len(c1.rkeys)
	}
	w1.mu.Lock()
	w1.message(0, forgetMsg(c1.id, d.region+1, d.region+1000, ^uint32(0)))
	w1.message(0, forgetMsg(c1.id+1, d.region)) // for no connection: dropped
	w1.mu.Unlock()
	if n := known(); n != 1 || c1.Err() != nil {
		t.Fatalf("after forgets of regions never described: %d regions known, the connection's error %v", n, c1.Err())
	}
	w1.mu.Lock()
	w1.message(0, forgetMsg(c1.id, d.region)) // the peer's lie: the region is live
	w1.mu.Unlock()
	if n := known(); n != 0 {
		t.Fatalf("a forget of the one region known left %d", n)
	}
	if err := c1.Put(ctx, b1, d); err != nil {
		t.Fatalf("a put after a forged forget of its live region: %v", err)
	}
	if n := known(); n != 1 {
		t.Fatalf("the region was not learned again: %d known", n)
	}
	for _, body := range [][]byte{nil, {1, 0, 0}, make([]byte, 4), make([]byte, 4*(forgetMax+1))} {
		if len(body) > 4 {
			for i := range len(body) / 4 {
				binary.LittleEndian.PutUint32(body[4*i:], uint32(i+1))
			}
		}
		_, _, r1, _, c1, _ := connectedPair(t, ctx)
		w1 := r1.w
		w1.mu.Lock()
		w1.message(0, append(header(msgForget, c1.id, len(body)), body...))
		w1.mu.Unlock()
		if err := c1.Err(); !errors.Is(err, ErrProtocol) {
			t.Errorf("a malformed forget of %d bytes: the connection's error %v, want ErrProtocol", len(body), err)
		}
	}
}

// TestForgetDuringCopy: a forget of the peer's region that comes while a transfer copies into
// its segment (the peer deregistered it, or lies) takes the region out of the connection's table
// at once, and keeps its key, which keeps the segment attached here, until the transfer ends:
// the copies after the forget land (destroyed at once, the key would have detached the segment
// under them: SIGSEGV), the transfer succeeds, and the key is destroyed then.
func TestForgetDuringCopy(t *testing.T) {
	const n, size = 8, 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := newCopyPair(t)
	w := p.ws[0]
	src, dst, ds := p.blocks(t, n, size)
	var e *rkeyEntry
	w.copyHook = func(i int) {
		if i != 0 {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		e = p.c.rkeys[ds[0].region]
		if e == nil || e.direct != 1 {
			t.Error("the peer's region is not reached by copy")
			return
		}
		w.message(0, forgetMsg(p.c.id, ds[0].region))
		if p.c.rkeys[ds[0].region] != nil || !e.retired || e.rkey == 0 {
			t.Errorf("forgotten under a copy: in the table %v, retired %v, key %#x", p.c.rkeys[ds[0].region] != nil, e.retired, e.rkey)
		}
	}
	tx := putBatch(ctx, t, p.c, src, ds, dst, "a batch by copy whose region was forgotten under it")
	if e == nil {
		t.Fatal("no copy")
	}
	w.mu.Lock()
	retired, key, local := len(p.c.retired), e.rkey, e.local
	w.mu.Unlock()
	if retired != 0 || key != 0 {
		t.Errorf("after the transfer: %d keys retired, the forgotten one %#x; want destroyed", retired, key)
	}
	if m, ok := findMapping(local); ok && m.sysv() {
		t.Errorf("the forgotten region's segment is still attached at %#x after its last copy", local)
	}
	w.copyHook = nil
	if err := tx.Reset(); err != nil {
		t.Fatal(err)
	}
	for i := range src { // learned again from the same descriptors, by copy again
		if err := tx.Put(src[i], ds[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestForgetQueueBounded: the regions a worker deregisters wait in each connection's queue
// until a control slot is free to tell the peer of them (sendForgets). While none comes free (a
// peer that reads nothing keeps this worker's messages in flight), the queue grew by every
// region deregistered, without end. It is bounded: at its bound the connection fails with
// ErrProtocol, since its peer's count of this worker's live regions can no longer be kept.
func TestForgetQueueBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, _, _, _, c1, _ := connectedPair(t, ctx)
	const bound = 16 * forgetMax // ids: 64 KiB
	w1.mu.Lock()
	free := w1.free
	w1.free = nil // no control slot comes free
	most, n := 0, 0
	for ; n < 4*bound && c1.state == connOpen; n++ {
		w1.forgotten(1<<31 + uint32(n)) // a region deregistered...
		w1.sendForgets()                // ...and a progress round that finds no slot
		most = max(most, len(c1.forgets))
	}
	state := c1.state
	w1.free = free
	w1.mu.Unlock()
	if most > bound {
		t.Fatalf("%d regions deregistered without a free slot: %d ids queued for the peer (bound %d); the connection open: %v", n, most, bound, state == connOpen)
	}
	if err := c1.Err(); state != connFailed || !errors.Is(err, ErrProtocol) {
		t.Fatalf("the connection's queue of forgets at its bound: %v, want ErrProtocol", err)
	}
	t.Logf("failed after %d regions deregistered: %v", n, c1.Err())
}

// TestForgetsPassAStalledPeer: a peer that stops reading (A: its worker makes no progress, so
// this worker's messages to it stay in flight) must not keep the forgets of another connection
// (B, whose peer reads) from going. Messages took any free slot of the worker's, however many
// one connection held: the Sends to A, each left in flight by a canceled context, took every
// slot, B's forgets found none, and B was the one failed with ErrProtocol when its queue reached
// maxForgets, with A. A connection now holds connMessages message slots at most, and one is
// kept for each connection that holds none: B's forgets go while A stalls, and A, whose own
// messages are in flight, is failed at the bound.
func TestForgetsPassAStalledPeer(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w1 := newWorker(t)
	peer := func() (c1, c2 *Conn) {
		w := newWorker(t)
		l, err := w.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if c1, err = w1.Connect(ctx, l.Addr()); err != nil {
			t.Fatal(err)
		}
		if c2, err = l.Accept(ctx); err != nil {
			t.Fatal(err)
		}
		return c1, c2
	}
	cA, cA2 := peer()
	cB, cB2 := peer()
	wA := cA2.w
	wA.mu.Lock() // A stalls: its progress goroutine waits for the lock, and reads nothing
	stalled := true
	resume := func() {
		if stalled {
			stalled = false
			wA.mu.Unlock()
		}
	}
	t.Cleanup(resume) // before the workers' Close (cleanups run last first)

	// This worker's program sends to A until no more may be in flight: each Send returns at
	// once (its context is canceled) and leaves its message to UCX, which cannot send it once
	// the sockets to A are full.
	done, stop := context.WithCancel(ctx)
	stop()
	msg := make([]byte, 16<<10)
	sent := 0
	for ; ; sent++ {
		err := cA.Send(done, msg)
		if errors.Is(err, ErrBusy) {
			break
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("send %d to the stalled peer: %v", sent, err)
		}
		if sent > 1<<17 {
			t.Fatalf("%d messages sent to a peer that reads nothing, none refused", sent)
		}
	}
	w1.mu.Lock()
	heldA, free := cA.inflight, len(w1.free)
	w1.mu.Unlock()
	t.Logf("%d sends to the stalled peer, %d in flight; %d of the worker's %d slots free", sent, heldA, free, len(w1.slots))
	if heldA == 0 {
		t.Fatal("no message to the stalled peer stayed in flight")
	}

	// Regions of this worker's are deregistered, a batch at a time: B's peer reads, so its
	// forgets go between batches (a batch is one message's worth).
	id := uint32(1 << 31)
	for range 4 * maxForgets / forgetMax {
		w1.mu.Lock()
		for range forgetMax {
			w1.forgotten(id)
			id++
		}
		w1.mu.Unlock()
		for {
			w1.mu.Lock()
			queued, open, stuck := len(cB.forgets), cB.state == connOpen, len(w1.free) == 0
			w1.mu.Unlock()
			if queued == 0 || !open || stuck { // stuck: no slot can come free while A stalls
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("B's %d forgets never went while A stalled", queued)
			}
			time.Sleep(time.Millisecond)
		}
	}
	w1.mu.Lock()
	queued := len(cB.forgets)
	w1.mu.Unlock()
	if err := cB.Err(); err != nil {
		t.Fatalf("B, whose peer reads, failed while A stalled holding the worker's slots (%d messages in flight to A): %v", heldA, err)
	}
	if queued != 0 {
		t.Fatalf("B still has %d forgets queued", queued)
	}
	if err := cA.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("A, stalled with %d regions deregistered, ended with %v, want ErrProtocol at its bound of forgets", id-1<<31, err)
	}
	// B still carries messages.
	if err := cB.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if m, err := cB2.Recv(ctx); err != nil || string(m) != "after" {
		t.Fatalf("B's peer received %q, %v", m, err)
	}
	resume()
}

// TestMessageSlotsKeptPerConn: the control slots are shared so that no connection's messages
// (its forgets among them) wait on another's: messages for no connection, or a connection's
// beyond its first, take every control slot but one for each connection that holds none; a
// connection's messages hold connMessages slots at most; and the first message of a connection
// holding none still finds its slot when the others have taken all they may.
func TestMessageSlotsKeptPerConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, _, _, _, c1, _ := connectedPair(t, ctx)
	w1.mu.Lock()
	defer w1.mu.Unlock()
	st := &slotTaker{w: w1, kind: slotMsg}
	defer st.release()
	take := st.take
	for n := 0; take(c1); n++ {
		if n > controlSlots {
			t.Fatalf("one connection's messages took %d slots", n)
		}
	}
	if len(st.taken) != connMessages || c1.msgSlots != connMessages {
		t.Fatalf("one connection's messages took %d slots (it counts %d), want connMessages (%d)", len(st.taken), c1.msgSlots, connMessages)
	}
	st.release()
	if c1.msgSlots != 0 || w1.senders != 0 {
		t.Fatalf("after its messages' slots were freed: the connection counts %d, the worker %d connections holding one", c1.msgSlots, w1.senders)
	}
	held := w1.control
	for take(nil) {
	}
	kept := len(w1.conns) // none holds a message slot
	if got, want := len(st.taken), controlSlots-held-kept; got != want || kept == 0 {
		t.Fatalf("messages for no connection took %d slots, want %d: all but one for each of the %d connections", got, want, kept)
	}
	if !take(c1) {
		t.Fatal("a connection holding no slot found none for its message: the one kept for it was taken")
	}
	if take(c1) {
		t.Fatal("a connection took a second slot, one of those kept for the others")
	}
}

// slotTaker takes slots of one kind from w, whose mu the caller holds, for the tests of how
// connections share them; release gives back every slot taken.
type slotTaker struct {
	w     *Worker
	kind  uint8
	taken []uint32
}

// take takes a slot for c (nil: none), and reports whether there was one to take.
func (st *slotTaker) take(c *Conn) bool {
	i, ok := st.w.takeSlot(st.kind, c)
	if ok {
		st.taken = append(st.taken, i)
	}
	return ok
}

// release gives back every slot taken.
func (st *slotTaker) release() {
	for _, i := range st.taken {
		st.w.freeSlot(i)
	}
	st.taken = st.taken[:0]
}

// TestCloseWaitsForAControlSlot: an endpoint close that finds every control slot in flight (a
// few peers that read nothing keep their messages' slots there) is made once one is free: the
// connection's endpoint is closed and the connection reaped (its keys destroyed, its entry
// gone). The close was dropped: the connection stayed in the worker's table for good, its
// endpoint open, and Conn.Close said ErrBusy after 10 s.
func TestCloseWaitsForAControlSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, _, _, _, c1, _ := connectedPair(t, ctx)
	w1.mu.Lock()
	st := &slotTaker{w: w1, kind: slotClose}
	for st.take(nil) {
	}
	if len(st.taken) == 0 {
		w1.mu.Unlock()
		t.Fatal("no control slot to take")
	}
	w1.failConn(c1, fmt.Errorf("%w: closed by the test", ErrClosed))
	st.release() // the peers' messages complete: their slots are free again
	w1.signal()
	w1.mu.Unlock()
	select {
	case <-c1.reapedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection whose close found no control slot was never closed and reaped")
	}
	w1.mu.Lock()
	_, still := w1.conns[c1.id]
	w1.mu.Unlock()
	if still {
		t.Fatal("the reaped connection is still in the worker's table")
	}
}
