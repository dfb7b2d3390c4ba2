package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// answerCheckWorker returns a worker of MaxInFlight maxInFlight and AnswerTimeout an hour, and
// a connection of it (accepted from another worker), for tests of the AnswerTimeout check.
func answerCheckWorker(tb testing.TB, maxInFlight int) (*Worker, *Conn) {
	tb.Helper()
	needUCX(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := New(Options{MaxInFlight: maxInFlight, AnswerTimeout: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = w.Close() })
	peer, err := New(Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = peer.Close() })
	l, err := w.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := peer.Connect(ctx, l.Addr()); err != nil {
		tb.Fatal(err)
	}
	c, err := l.Accept(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return w, c
}

// checkAnswers runs w's AnswerTimeout check at now and returns the answer slots it looked at.
// Under w.mu.
func checkAnswers(w *Worker, now time.Time) int {
	w.answersSeen = time.Time{} // due now
	before := w.answerVisits
	w.expireAnswers(now)
	return w.answerVisits - before
}

// TestAnswerTimeoutCheckCost: the AnswerTimeout check looks at the answers in flight that are
// due, and the first that is not, whatever MaxInFlight is: it scanned every slot of the worker
// (2*MaxInFlight+1,024, some two million at MaxInFlight 1<<20), under the worker's mutex, every
// 100 ms while one answer was in flight. The answers are kept in the order they went in flight
// (their deadlines' order); one that ends leaves it wherever it is, and one that is due leaves
// it as its connection fails, so it is looked at once.
func TestAnswerTimeoutCheckCost(t *testing.T) {
	w, c := answerCheckWorker(t, 1<<16)
	w.mu.Lock()
	defer w.mu.Unlock()
	var taken []uint32
	for range 3 {
		i, ok := w.takeSlot(slotAnswer, c)
		if !ok {
			t.Fatal("no answer slot")
		}
		w.timeAnswer(i)
		taken = append(taken, i)
	}
	defer func() {
		for _, i := range taken {
			w.freeSlot(i)
		}
	}()
	if n := checkAnswers(w, time.Now()); n != 1 {
		t.Fatalf("a check with 3 answers in flight, none due, looked at %d slots (of %d), want 1",
			n, len(w.slots))
	}
	w.freeSlot(taken[1]) // ended, out of order
	taken = append(taken[:1], taken[2])
	if n := checkAnswers(w, time.Now()); n != 1 {
		t.Fatalf("a check with 2 answers in flight, none due, looked at %d slots, want 1", n)
	}
	if n := checkAnswers(w, time.Now().Add(2*time.Hour)); n != 2 {
		t.Fatalf("a check with 2 answers in flight, both due, looked at %d slots, want 2", n)
	}
	if !errors.Is(c.err, ErrPeer) {
		t.Fatalf("the connection of the answers due: %v, want ErrPeer", c.err)
	}
	if n := checkAnswers(w, time.Now().Add(2*time.Hour)); n != 0 {
		t.Fatalf("a check after the answers due failed their connection looked at %d slots, want 0", n)
	}
}

// BenchmarkAnswerTimeoutCheck: one AnswerTimeout check of a worker of MaxInFlight 1<<16 with
// one answer in flight, not due.
func BenchmarkAnswerTimeoutCheck(b *testing.B) {
	w, c := answerCheckWorker(b, 1<<16)
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.takeSlot(slotAnswer, c)
	if !ok {
		b.Fatal("no answer slot")
	}
	defer w.freeSlot(i)
	w.timeAnswer(i)
	now := time.Now()
	for b.Loop() {
		checkAnswers(w, now)
	}
}
