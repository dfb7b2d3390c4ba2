package remote

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFailedConnLogNamesRemoteOnce: a connection's failure was logged as "connection to X
// ended: ...: X sent ...", the remote named twice, where its error names it already; an error
// that does not (the peer's goodbye) still has the remote named, once.
func TestFailedConnLogNamesRemoteOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 3)
	var log bytes.Buffer
	w2.mu.Lock()
	w2.log = slog.New(slog.NewTextHandler(&log, nil))
	w2.failConn(conns[1], w2.tooLarge(conns[1], 1<<30)) // names the remote
	w2.message(0, header(msgBye, conns[2].id, 0))       // does not
	text := log.String()
	w2.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "ended") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d log lines of the connections' ends; want 2:\n%s", len(lines), text)
	}
	for i, l := range lines { // conns[1]'s end, then conns[2]'s
		remote := conns[1+i].remote
		if n := strings.Count(l, remote); n != 1 {
			t.Errorf("the log line names %q %d times; want once:\n%s", remote, n, l)
		}
	}
}
