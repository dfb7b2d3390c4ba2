package remote

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestEndedHolderDropLogNamesRemoteOnce: the log line of an ended connection whose messages the
// worker's bound dropped named the remote twice ("connection to listener X: ...: listener X
// held ..."), the error's text beginning with the remote too. It names it once.
func TestEndedHolderDropLogNamesRemoteOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 6)
	honest, hostile := conns[0], conns[1:]
	var log bytes.Buffer
	w2.mu.Lock()
	w2.log = slog.New(slog.NewTextHandler(&log, nil))
	w2.mu.Unlock()
	fillBound(t, w2, hostile, true)
	for i, c := range hostile {
		select {
		case <-c.reapedCh:
		case <-ctx.Done():
			t.Fatalf("hostile connection %d was not reaped: %v", i, ctx.Err())
		}
	}
	w2.mu.Lock()
	w2.message(0, boundMsg(honest))
	text := log.String()
	w2.mu.Unlock()
	var line string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "nobody received") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no log line of the dropped ended connection; logged:\n%s", text)
	}
	remote := hostile[0].remote
	if n := strings.Count(line, remote); n != 1 {
		t.Errorf("the log line names %q %d times; want once:\n%s", remote, n, line)
	}
}
