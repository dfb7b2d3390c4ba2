package ipcpool

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A connection that says nothing (no intro: it holds no slot, nothing was lent on it) does not
// hold up the owner's Close: Close cuts it and returns at once. (Close waited for its session,
// which read the intro until the handshake's deadline: the owner's Timeout.)
func TestOwnerCloseCutsSilentConnection(t *testing.T) {
	started := make(chan struct{}, 1)
	clientCred = func(c *net.UnixConn) (*unix.Ucred, error) {
		started <- struct{}{} // the session reads the intro next
		return peerCred(c)
	}
	t.Cleanup(func() { clientCred = peerCred }) // after the owner's Close: its sessions are done
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 6 << 20, FallbackPageable: true, Timeout: 3 * time.Second})
	must(t, "Serve", err)
	c, err := net.Dial("unix", path)
	must(t, "Dial", err)
	defer c.Close()
	<-started
	start := time.Now()
	must(t, "Close", w.Close())
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the owner's Close waited %v for a connection that says nothing", d)
	}
}
