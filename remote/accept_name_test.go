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
)

// TestAcceptedConnNamesClient: every connection a listener accepted was named "listener X",
// the listener's own address, so its errors and log lines (a hostile peer's, failed by a
// bound) could not tell its clients apart. Each is named by its client's address now, once.
func TestAcceptedConnNamesClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 3)
	ip, port := `127\.0\.0\.1`, `:[1-9][0-9]*`
	name := regexp.MustCompile("^client " + ip + port + " of listener " + ip + port + "$")
	for i, c := range conns {
		if !name.MatchString(c.remote) {
			t.Errorf("accepted connection %d is named %q; want its client's address", i, c.remote)
		}
	}
	if conns[1].remote == conns[2].remote {
		t.Errorf("two clients of one listener have one name, %q", conns[1].remote)
	}
	var log bytes.Buffer
	w2.mu.Lock()
	w2.log = slog.New(slog.NewTextHandler(&log, nil))
	w2.loseMessages(conns[1], 1) // the bound's failure of a hostile peer
	text := log.String()
	w2.mu.Unlock()
	err := conns[1].Err()
	if !errors.Is(err, ErrProtocol) || strings.Count(err.Error(), conns[1].remote) != 1 {
		t.Errorf("the connection's error %q does not name %q once", err, conns[1].remote)
	}
	if n := strings.Count(text, conns[1].remote); n != 1 {
		t.Errorf("the log names %q %d times; want once:\n%s", conns[1].remote, n, text)
	}
}

// TestAcceptedNameWithoutClient: a listener's connection whose client's address UCX could not
// say keeps the listener's name; one whose address bytes are no address says what they are.
func TestAcceptedNameWithoutClient(t *testing.T) {
	l := &Listener{addr: "0.0.0.0:13337"}
	sa, _, err := sockaddr("10.0.0.5:41234")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sa   []byte
		err  error
		want string
	}{
		{sa, errors.New("no query"), "listener 0.0.0.0:13337"},
		{sa, nil, "client 10.0.0.5:41234 of listener 0.0.0.0:13337"},
		{sa[:8], nil, "client short IPv4 address (8 bytes) of listener 0.0.0.0:13337"},
	} {
		if got := acceptedName(l, clientAddr(tc.sa, tc.err)); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}
