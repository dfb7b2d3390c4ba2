package remote

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestAnswersPassAStalledPeer: peer A asks target W for many large gets by message, then reads
// nothing (its worker's mutex held), which keeps W's answers to it in flight; peer B, whose
// worker reads, then gets a MiB from W by message, 32 parts, more than one connection's share
// of W's answer slots. B's get must complete while A stalls: A's answers must not hold every
// answer slot of W; and B's answers, queued behind A's (every slot counted in flight a moment),
// must go past them once slots are free. Once A reads again, W's counts come back to zero.
func TestAnswersPassAStalledPeer(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := New(Options{MaxInFlight: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	register := func(w *Worker) *Registration {
		p, err := testPool(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		r, err := w.Register(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := register(w)
	l, err := w.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peer := func() (pc, wc *Conn) {
		p := newWorker(t)
		if pc, err = p.Connect(ctx, l.Addr()); err != nil {
			t.Fatal(err)
		}
		if wc, err = l.Accept(ctx); err != nil {
			t.Fatal(err)
		}
		return pc, wc
	}
	cA, wA := peer()
	cB, wB := peer()
	rB := register(cB.w)

	const big = 8 << 20 // far beyond the sockets' buffers: the answers stay in flight to A
	w.mu.Lock()
	w.getMax = big // A's gets ask for so much (an honest peer's, getPart, fill nothing)
	w.mu.Unlock()
	src := liveBuffer(t, r, big)
	for i := range src {
		src[i] = byte(i * 7)
	}
	d := describe(t, r, src)

	// A asks for the buffer many times over and reads nothing after: its progress waits for
	// the mutex, held until the test ends, while its requests (short messages, written to the
	// socket at once) reach W.
	a := cA.w
	a.mu.Lock()
	stalled := true
	resume := func() {
		if stalled {
			stalled = false
			a.mu.Unlock()
		}
	}
	t.Cleanup(resume) // before the workers' Close (cleanups run last first)
	asks := 3 * w.opts.MaxInFlight
	for i := range asks {
		op := ucx.Op{Ep: cA.ep, Kind: ucx.OpData}
		h := dataHeader{kind: dataGet, conn: cA.peerID, op: uint64(i+1)<<32 | 7, addr: d.addr, n: big, region: d.region, base: d.base, size: d.size}
		h.encode(&op.Header)
		a.postAnswer(cA, op, nil, localHold{})
	}
	a.signal()
	// W answers what it can and queues the rest: A's share of the slots is full.
	for {
		w.mu.Lock()
		queued, inflight, state := wA.answering, wA.inflight, wA.state
		w.mu.Unlock()
		if state != connOpen {
			t.Fatalf("A's connection ended: %v", wA.Err())
		}
		if queued > 0 && inflight > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("W never queued an answer to A (%d waiting, %d in flight)", queued, inflight)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)

	dst := liveBuffer(t, rB, 1<<20)
	tr := cB.NewTransfer()
	if err := tr.Get(dst, describe(t, r, src[:len(dst)])); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := tr.Wait(wait); err != nil {
		w.mu.Lock()
		held, heldA, queuedA, queuedB := w.nanswer, wA.inflight, wA.answering, wB.answering
		w.mu.Unlock()
		t.Fatalf("B's get by message did not complete while A stalled: %v (W: %d of %d answer slots in flight, %d to A; answers waiting: %d to A, %d to B)", err, held, w.opts.MaxInFlight, heldA, queuedA, queuedB)
	}
	if cB.mode != ModeMessages {
		t.Fatalf("B's get went by mode %d, want messages (%d)", cB.mode, ModeMessages)
	}
	if !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatal("B's get brought other bytes")
	}
	if err := wA.Err(); err != nil {
		t.Fatalf("A's connection, whose answers wait, ended: %v", err)
	}

	// B's answers now wait behind A's: W counts every answer slot in flight while B's next
	// get comes, then lets them go. A's answers, first in the queue, are at their share of the
	// slots: B's must go past them.
	w.mu.Lock()
	fake := w.opts.MaxInFlight - w.nanswer
	w.nanswer += fake
	w.mu.Unlock()
	clear(dst)
	tr = cB.NewTransfer()
	if err := tr.Get(dst, describe(t, r, src[:len(dst)])); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		w.mu.Lock()
		queued := len(wB.answers) - wB.answerHead
		w.mu.Unlock()
		if queued > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("B's answers never waited for a slot")
		}
		time.Sleep(time.Millisecond)
	}
	w.mu.Lock()
	w.nanswer -= fake
	first := len(w.answers) > 0 && w.answers[0] == wA
	w.signal()
	w.mu.Unlock()
	if !first {
		t.Fatal("A's answers are not first in W's queue")
	}
	wait, stop = context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := tr.Wait(wait); err != nil {
		w.mu.Lock()
		held, queuedA, queuedB := w.nanswer, wA.answering, wB.answering
		w.mu.Unlock()
		t.Fatalf("B's answers, queued behind A's, did not go while A stalled: %v (W: %d answer slots in flight; answers waiting: %d to A, %d to B)", err, held, queuedA, queuedB)
	}
	if !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatal("B's second get brought other bytes")
	}

	// A reads again: its answers go, and W's counts come back to none held.
	resume()
	for {
		w.mu.Lock()
		held, left, holders := w.nanswer, wA.inflight+wA.answering, w.answerers
		shares := wA.ansSlots + wB.ansSlots
		w.mu.Unlock()
		if held == 0 && left == 0 && holders == 0 && shares == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after A read again: %d answer slots still held (%d by A and B, %d connections holding one), %d answers to A in flight or waiting", held, shares, holders, left)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAnswerSlotsKeptPerConn: one connection's answers take connAnswers slots at most, a
// quarter of MaxInFlight; with the cap lifted, all but one for each other connection, which
// then takes the one kept for it; freed, the counts come back to none.
func TestAnswerSlotsKeptPerConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2, _, _, c1, _ := connectedPair(t, ctx)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c3, err := w1.Connect(ctx, l.Addr()) // w1's second connection
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	w1.mu.Lock()
	defer w1.mu.Unlock()
	st := &slotTaker{w: w1, kind: slotAnswer}
	defer st.release()
	take := st.take
	free := func() {
		st.release()
		if c1.ansSlots != 0 || c3.ansSlots != 0 || w1.answerers != 0 || w1.nanswer != 0 {
			t.Fatalf("after the answers' slots were freed: the connections count %d and %d, the worker %d connections holding one, %d slots", c1.ansSlots, c3.ansSlots, w1.answerers, w1.nanswer)
		}
	}
	limit := w1.opts.MaxInFlight
	for n := 0; take(c1); n++ {
		if n > limit {
			t.Fatalf("one connection's answers took %d slots", n)
		}
	}
	if want := limit / answerShare; len(st.taken) != want || c1.ansSlots != want || w1.connAnswers != want {
		t.Fatalf("one connection's answers took %d slots (it counts %d), want %d of %d", len(st.taken), c1.ansSlots, want, limit)
	}
	if !take(c3) {
		t.Fatal("the other connection found no slot for its answer")
	}
	free()

	kept := len(w1.conns) - 1 // c1 holds slots, the others none
	saved := w1.connAnswers
	w1.connAnswers = limit // the cap lifted: the kept slots alone
	for take(c1) {
	}
	w1.connAnswers = saved
	if got, want := len(st.taken), limit-kept; got != want || kept == 0 {
		t.Fatalf("one connection's answers took %d slots, want %d: all but one for each of the %d others", got, want, kept)
	}
	if !take(c3) {
		t.Fatal("a connection holding no slot found none for its answer: the one kept for it was taken")
	}
	if take(c3) {
		t.Fatal("a connection took a second slot, one of those kept for the others")
	}
	free()
}

// queuedAnswers returns how many answers wait for a slot. Test helper. Under mu.
func (w *Worker) queuedAnswers() int {
	n := 0
	for _, c := range w.answers {
		n += len(c.answers) - c.answerHead
	}
	return n
}
