package ipcpool

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An Attach whose ready comes after the owner gave its handshake up (the owner's
// Options.Timeout) fails with an error matching context.DeadlineExceeded, not ErrRefused: the
// owner says why it gave the process up, and a caller tells a timeout it may retry from a
// refusal of its credentials, which stays ErrRefused alone. (Both were ErrRefused.)
func TestLateReadyIsATimeoutNotARefusal(t *testing.T) {
	w, path := serveTest(t, Options{Timeout: 100 * time.Millisecond})
	readyPause = func() {
		// The owner has given the handshake up (and said so) once it freed the slot.
		waitFor(t, func() bool { return w.Attached() == 0 })
	}
	t.Cleanup(func() { readyPause = nil })
	_, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRefused) {
		t.Fatalf("Attach whose ready came after the owner's timeout: %v; want a timeout, not ErrRefused", err)
	}
	readyPause = nil

	w.mu.Lock()
	w.allow = map[int]bool{} // not even the owner's user: this process is refused
	w.mu.Unlock()
	_, err = Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	if !errors.Is(err, ErrRefused) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Attach by a refused user: %v; want ErrRefused, not a timeout", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("%d attached after the refusals", n)
	}
}
