package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestUCXStepTimesOut: a step that hangs (a peer that stops answering) is ended at the step
// limit and recorded as failed, timed out, and the steps after it run. It hung the whole run:
// the steps' calls waited on context.Background().
func TestUCXStepTimesOut(t *testing.T) {
	var ran []string
	steps := []ucxStep{
		{cases: []string{"put/4KiB", "get/4KiB"}, run: func(ctx context.Context) ([]ucxRow, error) {
			ran = append(ran, "put/4KiB")
			<-ctx.Done() // the peer never answers
			return nil, ctx.Err()
		}},
		{cases: []string{"batch/1000x16KiB"}, run: func(context.Context) ([]ucxRow, error) {
			ran = append(ran, "batch/1000x16KiB")
			return []ucxRow{{Case: "batch/1000x16KiB", Remote: 100}}, nil
		}},
	}
	type result struct {
		rows   []ucxRow
		failed []string
	}
	done := make(chan result, 1)
	go func() {
		rows, failed := runUCXSteps(context.Background(), regexp.MustCompile(""), steps,
			20*time.Millisecond)
		done <- result{rows, failed}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second): // a watchdog, not a synchronization
		t.Fatal("the run hung on the step that hangs (its limit 20ms)")
	}
	if len(ran) != 2 || len(r.rows) != 2 || len(r.failed) != 1 {
		t.Fatalf("ran %q; rows %+v; failed %q: want both run, the first failed", ran, r.rows, r.failed)
	}
	if r.failed[0] != "put/4KiB, get/4KiB" || r.rows[0].Case != r.failed[0] ||
		!strings.HasPrefix(r.rows[0].Error, "timed out after 20ms: ") || r.rows[1].Remote != 100 {
		t.Errorf("rows %+v, failed %q: want the first timed out after 20ms, the batch's figures",
			r.rows, r.failed)
	}

	// A step that fails on its own within its limit does not say it timed out, nor does one
	// whose run was ended (a parent ctx cancelled).
	errOwn := errors.New("refused")
	steps[0].run = func(context.Context) ([]ucxRow, error) { return nil, errOwn }
	rows, _ := runUCXSteps(context.Background(), regexp.MustCompile("put"), steps, time.Minute)
	if len(rows) != 1 || rows[0].Error != errOwn.Error() {
		t.Errorf("rows %+v, want the step's own error alone", rows)
	}
	steps[0].run = func(ctx context.Context) ([]ucxRow, error) { return nil, ctx.Err() }
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	rows, _ = runUCXSteps(ended, regexp.MustCompile("put"), steps, time.Minute)
	if len(rows) != 1 || rows[0].Error != context.Canceled.Error() {
		t.Errorf("rows %+v, want the run's end alone", rows)
	}
}

// fakePeerConn is a connection to a peer that never answers: Recv waits for its ctx.
type fakePeerConn struct{ sent []string }

func (c *fakePeerConn) Send(ctx context.Context, msg []byte) error {
	c.sent = append(c.sent, string(msg))
	return nil
}

func (c *fakePeerConn) Recv(ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestUCXCallAfterTimeout: once a command to the peer has had no answer by its step's end,
// later commands fail at once, saying why, without being sent: the late answer would be read
// as theirs.
func TestUCXCallAfterTimeout(t *testing.T) {
	b := &ucxBenchState{}
	c := &fakePeerConn{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := b.call(ctx, c, "alloc 4096 1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a command without answer: %v, want its ctx's deadline", err)
	}
	watchdog, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	_, err := b.call(watchdog, c, "free")
	if !errors.Is(err, errPeerLost) || !strings.Contains(err.Error(), `"alloc 4096 1"`) {
		t.Errorf("a command after one timed out: %v, want errPeerLost naming that one", err)
	}
	if len(c.sent) != 1 {
		t.Errorf("sent %q, want the first command alone", c.sent)
	}
}
