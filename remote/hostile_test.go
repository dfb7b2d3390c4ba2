package remote

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestCheckTargetRefusesBeyondRegion: a data message's range that starts past the end of the
// region it names is refused, whatever its length: base+size-addr must not wrap around.
func TestCheckTargetRefusesBeyondRegion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, w2, _, r2, _, _ := connectedPair(t, ctx)
	d := describe(t, r2, liveBuffer(t, r2, 4096))
	end := d.base + d.size
	w2.mu.Lock()
	defer w2.mu.Unlock()
	for _, c := range []struct{ addr, n uint64 }{
		{end, 1}, {end, 4096}, {end + 1<<20, 8}, {1<<63 + 5, 16}, {^uint64(0) - 8, 8},
		{end - 8, 16}, {d.base - 1, 1}, {d.base, d.size + 1}, {d.base, 0},
	} {
		h := dataHeader{kind: dataPut, addr: c.addr, n: c.n, region: d.region, base: d.base, size: d.size}
		if st := w2.checkTarget(h); st != answerRefused {
			t.Errorf("[%#x, +%d) of region [%#x, +%d): status %d, want refused (%d)", c.addr, c.n, d.base, d.size, st, answerRefused)
		}
	}
	h := dataHeader{kind: dataPut, addr: d.addr, n: d.n, region: d.region, base: d.base, size: d.size}
	if st := w2.checkTarget(h); st != answerOK {
		t.Fatalf("the descriptor's own range: status %d", st)
	}
}

// TestForgedPutPastRegionRefused: a peer sends a put by message that names a region of this
// worker (its id, base and size as a descriptor has them) at an address past the region's end.
// The target must refuse it and write nothing; the bytes must not land at that address (here a
// buffer of the other worker's pool, in this process, lying above the region).
func TestForgedPutPastRegionRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2, r1, r2, c1, c2 := connectedPair(t, ctx)
	b1, b2 := liveBuffer(t, r1, 4096), liveBuffer(t, r2, 4096)
	// The target is the worker whose region lies below the other's: the forged address, past
	// its region's end, is the other's buffer (the hostile peer's own: nothing else is hurt).
	hostile, target, hc, hb, tb := w1, w2, c1, b1, b2
	treg := r2
	if mem.Addr(b1) < mem.Addr(b2) {
		hostile, target, hc, hb, tb = w2, w1, c2, b2, b1
		treg = r1
	}
	d := describe(t, treg, tb)
	landing := uint64(mem.Addr(hb))
	if landing < d.base+d.size {
		t.Skipf("the pools' regions overlap in address order: [%#x, +%d), %#x", d.base, d.size, landing)
	}
	for i := range hb {
		hb[i] = 0xAA
	}
	src, err := hostile.regionOf(hb)
	if err != nil {
		t.Fatal(err)
	}
	payload := hb[:64] // the bytes sent are the landing buffer's own: a copy of 0xAA over 0x55 shows
	for i := range payload {
		payload[i] = 0x55
	}
	before := target.stats.answers.Load()
	hostile.mu.Lock()
	op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData, Local: uint64(mem.Addr(payload)), Length: uint64(len(payload)), Mem: src.mem}
	h := dataHeader{kind: dataPut, conn: hc.peerID, op: 1<<32 | 7, addr: landing + 64, n: uint64(len(payload)),
		region: d.region, base: d.base, size: d.size}
	h.encode(&op.Header)
	hostile.postAnswer(hc, op, nil, localHold{})
	hostile.signal()
	hostile.mu.Unlock()
	for target.stats.answers.Load() == before { // the target answered: refused, or placed and acknowledged
		if ctx.Err() != nil {
			t.Fatal("the target never answered the forged put")
		}
		time.Sleep(time.Millisecond)
	}
	for i, x := range hb[64:128] {
		if x != 0xAA {
			t.Fatalf("byte %d at %#x, %d bytes past the end of the region named [%#x, +%d), was written by the peer's put: %#x", 64+i, landing+64+uint64(i), landing+64-d.base-d.size, d.base, d.size, x)
		}
	}
}

// TestForgedRangeOutsideLiveBuffer: a peer's put or get by message that names a range of a
// region of this worker (its id, base and size right) but outside every live buffer of its pool
// is refused (ErrDescriptor at the peer), and nothing is copied: the region's tail, address
// space its pool has not committed (PROT_NONE: the target's copy of a put died of SIGSEGV, and
// UCX's send of a get's answer failed with EFAULT, ending the connection); a buffer freed after it
// was described (free memory, the pool's to hand out next); a range running from a live buffer
// into the free memory after it. The connection still moves the honest descriptor's bytes.
func TestForgedRangeOutsideLiveBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, r1, r2, c1, _ := connectedPair(t, ctx)
	src := liveBuffer(t, r1, 1<<20)
	d := describe(t, r2, liveBuffer(t, r2, 4096))
	freed, err := r2.pool.Alloc(1 << 20) // a page of its own, past the first buffer's
	if err != nil {
		t.Fatal(err)
	}
	df := describe(t, r2, freed)
	if err := r2.pool.Free(freed); err != nil {
		t.Fatal(err)
	}
	forged := func(addr, n uint64) Descriptor {
		f := d
		f.addr, f.n = addr, n
		return f
	}
	for _, c := range []struct {
		name string
		d    Descriptor
		get  bool
	}{
		{"put into a freed buffer", df, false},
		{"get from a freed buffer", df, true},
		{"put running past a live buffer", forged(d.addr, 8192), false},
		{"put into the region's uncommitted tail", forged(d.base+d.size-4096, 4096), false},
		{"get from the region's uncommitted tail", forged(d.base+d.size-4096, 4096), true},
	} {
		op := c1.Put
		if c.get {
			op = c1.Get
		}
		if err := op(ctx, src[:c.d.n], c.d); !errors.Is(err, ErrDescriptor) {
			t.Errorf("%s [%#x, +%d) of region [%#x, +%d): %v, want the target's refusal (ErrDescriptor)", c.name, c.d.addr, c.d.n, c.d.base, c.d.size, err)
		}
	}
	if err := c1.Put(ctx, src[:d.n], d); err != nil {
		t.Fatalf("a put of the honest descriptor after the forged ones: %v", err)
	}
}

// liveBuffer allocates n bytes of r's pool for the test, freed when it ends (before the
// workers close: cleanups run last first).
func liveBuffer(t *testing.T, r *Registration, n int) []byte {
	t.Helper()
	b, err := r.pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.pool.Free(b) })
	return b
}

// describe returns r's descriptor of b.
func describe(t *testing.T, r *Registration, b []byte) Descriptor {
	t.Helper()
	d, err := r.Describe(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// regionOf returns the registered region of b. Test helper.
func (w *Worker) regionOf(b []byte) (*localRegion, error) {
	lr := w.lookup(mem.Addr(b), uintptr(len(b)))
	if lr == nil {
		return nil, ErrNotRegistered
	}
	return lr, nil
}

// TestQueuedAnswerAfterRegionGone: a peer's get whose answer waits for a slot (the target's
// answer slots are all in flight: a peer that does not read) must not be sent from a region that
// was deregistered meanwhile (the registration closed: UCX would send naming a registration it
// has dropped): it is refused, without bytes. Nor may its buffer be given back under it: the
// answer holds the buffer (TestAnswerHoldsItsBuffer), so a free of it and its pool's Close
// meanwhile wait for the answer (ErrBusy), which carries the bytes the peer asked for while the
// buffer was live.
func TestQueuedAnswerAfterRegionGone(t *testing.T) {
	for _, closeRegistration := range []bool{true, false} {
		name := map[bool]string{true: "registration closed", false: "buffer freed, pool closed"}[closeRegistration]
		t.Run(name, func(t *testing.T) { queuedAnswerAfterRegionGone(t, closeRegistration) })
	}
}

func queuedAnswerAfterRegionGone(t *testing.T, closeRegistration bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, w2, r1, r2, c1, _ := connectedPair(t, ctx)
	b2, err := r2.pool.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	fill(b2, 5)
	d := describe(t, r2, b2[:4096])
	b1 := liveBuffer(t, r1, 4096)
	tr, resume := stalledGet(ctx, t, w2, c1, b1, d)
	if closeRegistration {
		if err := r2.Close(); err != nil {
			t.Fatal(err)
		}
	} else { // the peer said it is done with the buffer: it is freed, and its pool closed
		if err := r2.pool.Free(b2); err != nil {
			t.Fatal(err)
		}
		if err := r2.pool.Close(); !errors.Is(err, pinned.ErrBusy) {
			t.Fatalf("the pool's Close while an answer waits to send its buffer: %v, want ErrBusy", err)
		}
	}
	resume()
	err = tr.Wait(ctx)
	if closeRegistration {
		if !errors.Is(err, ErrDescriptor) {
			t.Fatalf("the get answered after its region was deregistered: %v, want the refusal (ErrDescriptor)", err)
		}
		_ = r2.pool.Free(b2)
		return
	}
	if err != nil {
		t.Fatalf("the get whose answer held its buffer: %v", err)
	}
	check(t, "get", b1, 5)
	for r2.pool.Usage().Live > 0 {
		if ctx.Err() != nil {
			t.Fatal("the buffer freed while its answer waited is still live after the answer went")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAnswerQueueBounded: a peer that keeps sending gets by message while the answers cannot
// go (every answer slot in flight: a peer that does not read them) must not grow the queue of
// answers without bound: past what an honest peer can have in flight on a connection (its
// window of data messages, dataWindow), its connection fails with ErrProtocol and its queued
// answers are dropped. The bound was 1<<20 (some 150 MiB of queued answers per connection).
func TestAnswerQueueBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, r2, _, c2 := connectedPair(t, ctx)
	d := describe(t, r2, liveBuffer(t, r2, 4096))
	w2.mu.Lock()
	flood := dataWindow + 1
	saved := w2.nanswer
	w2.nanswer = w2.opts.MaxInFlight // every answer slot in flight
	var ev ucx.Event
	ev.Kind = ucx.EventData
	for i := range flood {
		h := dataHeader{kind: dataGet, conn: c2.id, op: uint64(i)<<32 | 1, addr: d.addr, n: d.n, region: d.region, base: d.base, size: d.size}
		h.encode(&ev.Header)
		w2.data(&ev)
	}
	queued, state := w2.queuedAnswers(), c2.state
	w2.nanswer = saved
	w2.mu.Unlock()
	if state != connFailed || queued > 0 {
		t.Fatalf("after %d gets of a peer that reads no answer: %d answers queued, connection state %d; want it failed, none queued", flood, queued, state)
	}
	if err := c2.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("the connection ended with %v, want ErrProtocol", err)
	}
}

// TestSilentConnectionExpires: a client that connects to a listener and never sends its hello
// holds a place among the endpoints waiting for one (maxPending of them: then the listener
// refuses everyone) only until the handshake's deadline; its endpoint is closed then.
func TestSilentConnectionExpires(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	saved := helloTimeout
	t.Cleanup(func() { helloTimeout = saved }) // after the workers' Close (cleanups run last first): their goroutines read it
	helloTimeout = 300 * time.Millisecond
	w1, w2 := newWorker(t), newWorker(t)
	var log bytes.Buffer // written under w2.mu
	w2.mu.Lock()
	w2.log = slog.New(slog.NewTextHandler(&log, nil))
	w2.mu.Unlock()
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sa, _, err := sockaddr(l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	w1.mu.Lock()
	ep, err := w1.uw.ConnectSockaddr(sa) // an endpoint, and no hello on it
	w1.signal()
	w1.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		w2.mu.Lock()
		defer w2.mu.Unlock()
		return len(w2.pending)
	}
	for pending() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the listener never accepted the endpoint")
		}
		time.Sleep(time.Millisecond)
	}
	accepted := time.Now()
	for pending() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%v after a connection without a hello, its endpoint still waits for one (deadline %v)", time.Since(accepted), helloTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	w2.mu.Lock()
	text := log.String()
	w2.mu.Unlock()
	if !regexp.MustCompile(`client 127\.0\.0\.1:[1-9][0-9]* of listener ` + regexp.QuoteMeta(l.Addr()) +
		` sent no hello`).MatchString(text) {
		t.Errorf("the log does not name the silent client:\n%s", text)
	}
	// The listener still serves a client that says hello.
	c, err := w1.Connect(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	w1.mu.Lock()
	w1.closeEp(ep, nil, true)
	w1.mu.Unlock()
}

// TestDataFloodQueueBounded: a peer that sends data messages faster than the target's progress
// goroutine takes them (here 200,000 small gets, or puts of 512 bytes, naming no region of the
// target's, each answered with a refusal) must not grow the queue that UCX's callbacks fill (a
// malloc per message, and the bytes of a put copied, or held in UCX's buffers) without bound:
// the progress goroutine stops calling UCX's progress while events of its last call remain, so
// the queue holds at most what one call of progress received, and the rest waits in the
// sockets (the peer's sends in its own UCX). None is dropped: every message is answered, or,
// once more answers wait to be sent than an honest peer can have due (its window of data
// messages, dataWindow: TestAnswerQueueBounded), the connection fails with ErrProtocol.
func TestDataFloodQueueBounded(t *testing.T) {
	for _, kind := range []uint8{dataGet, dataPut} {
		name := map[uint8]string{dataGet: "gets", dataPut: "puts"}[kind]
		t.Run(name, func(t *testing.T) { testDataFlood(t, kind) })
	}
}

func testDataFlood(t *testing.T, kind uint8) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hostile, target, hr, _, hc, tc := connectedPair(t, ctx)
	flood := 200_000
	if raceEnabled {
		flood = 50_000
	}
	const bound = 4096 // events queued at once, at most
	var payload []byte
	var src *localRegion
	if kind == dataPut {
		b := liveBuffer(t, hr, 512)
		var err error
		if src, err = hostile.regionOf(b); err != nil {
			t.Fatal(err)
		}
		payload = b
	}
	target.mu.Lock()
	before := target.stats.answers.Load()
	target.mu.Unlock()
	start := time.Now()
	hostile.mu.Lock()
	hostile.answerBound = flood // its own queue of sends takes the flood
	for i := range flood {
		op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData}
		h := dataHeader{kind: kind, conn: hc.peerID, op: uint64(i)<<32 | 1, addr: 1 << 40, n: 8, region: 1<<31 + 7, base: 1 << 40, size: 4096}
		if payload != nil {
			op.Local, op.Length, op.Mem = uint64(mem.Addr(payload)), uint64(len(payload)), src.mem
			h.n = uint64(len(payload))
		}
		h.encode(&op.Header)
		hostile.postAnswer(hc, op, nil, localHold{}) // the hostile worker's own queue of sends takes what its slots cannot
	}
	hostile.signal()
	hostile.mu.Unlock()
	for target.stats.answers.Load()-before < uint64(flood) {
		if err := tc.Err(); err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("the flooded connection failed with %v, want ErrProtocol", err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the target answered %d of %d messages", target.stats.answers.Load()-before, flood)
		}
		time.Sleep(5 * time.Millisecond)
	}
	target.mu.Lock()
	_, high := target.uw.Queued()
	dropped := target.uw.Dropped()
	target.mu.Unlock()
	t.Logf("%d of %d data messages answered in %v (connection: %v); "+
		"the target's event queue held %d at most", target.stats.answers.Load()-before, flood,
		time.Since(start).Round(time.Millisecond), tc.Err(), high)
	if dropped != 0 {
		t.Errorf("the target dropped %d messages", dropped)
	}
	if high > bound {
		t.Fatalf("a flood of %d data messages queued %d events at once in the target's callbacks (bound %d): the queue grows with the flood", flood, high, bound)
	}
}

// TestWorkerCloseEndsTransfersAsClosed: a transfer whose answer has not come when this worker
// is closed ends with ErrClosed, saying so once: not also as a connection the peer reset (an
// error matching pinmalloc.ErrRefused, "a peer that is gone"), which is what its status said.
func TestWorkerCloseEndsTransfersAsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2, r1, r2, c1, _ := connectedPair(t, ctx)
	d := describe(t, r2, liveBuffer(t, r2, 4096))
	b1 := liveBuffer(t, r1, 4096)
	tr, resume := stalledGet(ctx, t, w2, c1, b1, d)
	defer resume()
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	err := tr.Wait(ctx)
	if !errors.Is(err, ErrClosed) || errors.Is(err, pinmalloc.ErrRefused) || strings.Contains(err.Error(), "reset") {
		t.Fatalf("a transfer in flight when its worker closed: %v; want ErrClosed, and not a peer's reset (pinmalloc.ErrRefused)", err)
	}
}

// TestAnswerHoldsItsBuffer: the answer to a peer's get is sent by UCX from the buffer it names
// for as long as the peer takes to read it (zero-copy over TCP); a peer that stops reading keeps
// it in flight. The buffer freed and its pool closed meanwhile must not give the memory back
// under UCX's send: it did (the pool's Close unmapped it), and once the peer read again, UCX's
// send failed with EFAULT and UCX 1.13 aborted the process (uct_iface.h: "Assertion
// `comp->count > 0' failed"). The answer holds its buffer until UCX has sent it: the pool's
// Close reports ErrBusy, and the memory goes once the answer has.
func TestAnswerHoldsItsBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hostile, target, _, tr, hc, _ := connectedPair(t, ctx)
	const n = 32 << 20 // two answers of it fill the sockets: they stay in flight
	target.mu.Lock()
	target.getMax = n // the peer's gets ask for so much (an honest peer's, getPart, fill nothing)
	target.mu.Unlock()
	b, err := tr.pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, tr, b)
	hostile.mu.Lock()
	for i := range 2 {
		op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData}
		h := dataHeader{kind: dataGet, conn: hc.peerID, op: uint64(i+1)<<32 | 7, addr: d.addr, n: n, region: d.region, base: d.base, size: d.size}
		h.encode(&op.Header)
		hostile.postAnswer(hc, op, nil, localHold{})
	}
	hostile.signal()
	hostile.mu.Unlock()
	inFlight := func() int {
		target.mu.Lock()
		defer target.mu.Unlock()
		held := 0
		for _, lr := range target.byID {
			held += lr.held
		}
		return held
	}
	for inFlight() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the target's answers never went in flight")
		}
		time.Sleep(time.Millisecond)
	}
	hostile.mu.Lock() // the peer stops reading: its progress waits for the mutex
	time.Sleep(20 * time.Millisecond)
	stuck := inFlight()
	if err := tr.pool.Free(b); err != nil {
		t.Fatal(err)
	}
	err = tr.pool.Close()
	hostile.mu.Unlock() // it reads again: UCX goes on sending
	if stuck == 0 {
		t.Skip("the answers were sent before the peer stopped reading: nothing was in flight")
	}
	if !errors.Is(err, pinned.ErrBusy) {
		t.Fatalf("the pool's Close with %d answers in flight from a buffer: %v, want ErrBusy (the buffer held until they are sent)", stuck, err)
	}
	for inFlight() > 0 || tr.pool.Usage().Live > 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d answers still in flight, %d buffers live", inFlight(), tr.pool.Usage().Live)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPutHoldsItsBuffer: the buffer a peer's put by message lands in is held from the check of
// its range to the copy of its bytes, so that its owner's free meanwhile (the peer said it was
// done, and lied) waits for the copy: the free and a Trim between the two gave the buffer's
// memory back (decommitted, PROT_NONE), and the copy died of SIGSEGV. Here the owner frees
// the buffer and trims its pool at that moment (targetHook); the put lands and is
// acknowledged, and the free takes effect after it.
func TestPutHoldsItsBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, target, r1, r2, c1, _ := connectedPair(t, ctx)
	liveBuffer(t, r2, 4096) // the region keeps a buffer: only the victim's memory goes
	// One message (putPart): the hook frees the buffer under its only part.
	victim, err := r2.pool.Alloc(putPart)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, r2, victim)
	src := liveBuffer(t, r1, putPart)
	fill(src, 9)
	var freed error
	target.mu.Lock()
	target.targetHook = func() {
		if freed = r2.pool.Free(victim); freed == nil {
			freed = r2.pool.Trim()
		}
		target.targetHook = nil
	}
	target.mu.Unlock()
	if err := c1.Put(ctx, src, d); err != nil {
		t.Fatalf("a put whose buffer its owner freed as it landed: %v", err)
	}
	target.mu.Lock() // the hook ran before the progress goroutine took it to copy
	err = freed
	target.mu.Unlock()
	if err != nil {
		t.Fatalf("the owner's free and Trim: %v", err)
	}
	for r2.pool.Usage().Live != 1 {
		if ctx.Err() != nil {
			t.Fatal("the buffer freed under the put is still live after it")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEmptyMessageFloodBounded: the messages a peer sends that nobody receives (Recv) are
// bounded by what they cost, not only by their bytes: a peer sending empty messages grew the
// queue without end (each counted zero bytes against the bound, yet held a slice and the
// event's copy). Past the bound, its connection fails with ErrProtocol, as for a flood of full
// ones.
func TestEmptyMessageFloodBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, _, _, c2 := connectedPair(t, ctx)
	m := header(msgData, c2.id, 0) // an empty message of the peer's, for c2
	w2.mu.Lock()
	sent := 0
	for ; sent <= 2*queuedMessages/msgOverhead && c2.state == connOpen; sent++ {
		w2.message(0, m)
	}
	queued, state := len(c2.msgs), c2.state
	w2.mu.Unlock()
	if state != connFailed {
		t.Fatalf("%d empty messages queued, none received, and the connection is still open", queued)
	}
	if err := c2.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("the connection ended with %v, want ErrProtocol", err)
	}
	t.Logf("failed after %d empty messages", sent)
}

// stalledGet starts a get of d into b1 over c1 whose answer target w2 queues and does not send:
// every answer slot of w2's counts in flight. It returns once the answer is queued; resume
// frees the slots and wakes w2, which then sends it.
func stalledGet(ctx context.Context, t *testing.T, w2 *Worker, c1 *Conn, b1 []byte, d Descriptor) (tr *Transfer, resume func()) {
	t.Helper()
	w2.mu.Lock()
	saved := w2.nanswer
	w2.nanswer = w2.opts.MaxInFlight // every answer slot in flight
	w2.mu.Unlock()
	tr = c1.NewTransfer()
	if err := tr.Get(b1, d); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		w2.mu.Lock()
		n := w2.queuedAnswers()
		w2.mu.Unlock()
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the get's answer was never queued")
		}
		time.Sleep(time.Millisecond)
	}
	return tr, func() {
		w2.mu.Lock()
		w2.nanswer = saved
		w2.signal()
		w2.mu.Unlock()
	}
}

// TestPutAfterRegistrationCloseRefused: a put by message whose target region is deregistered
// (Registration.Close) between the check of its range and the copy of its bytes is refused,
// its bytes never copied: the target checked the region when the put came, held the buffer,
// then copied without looking again, so the put landed after Close had returned. Here the
// owner closes the registration at that moment (targetHook), the buffer still live.
func TestPutAfterRegistrationCloseRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, target, r1, r2, c1, _ := connectedPair(t, ctx)
	dst := liveBuffer(t, r2, putPart) // one message (putPart)
	clear(dst)
	d := describe(t, r2, dst)
	src := liveBuffer(t, r1, putPart)
	fill(src, 9)
	var closed error
	target.mu.Lock()
	target.targetHook = func() {
		closed = r2.Close()
		target.targetHook = nil
	}
	target.mu.Unlock()
	err := c1.Put(ctx, src, d)
	target.mu.Lock() // the hook ran before the progress goroutine took it to copy
	closedErr := closed
	target.mu.Unlock()
	if closedErr != nil {
		t.Fatalf("the registration's Close: %v", closedErr)
	}
	if !errors.Is(err, ErrDescriptor) {
		t.Fatalf("a put whose target region was deregistered before its copy: %v, want ErrDescriptor", err)
	}
	if n := len(dst) - bytes.Count(dst, []byte{0}); n > 0 {
		t.Fatalf("the put landed after the registration's Close returned: %d of its %d bytes written", n, len(dst))
	}
}
