package ipcpool

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A rejoin donates the pool's descriptors to a new owner from the client's goroutine while the
// process may be leaving: the space's close waits for a donation under way, and a donation
// after the close sends nothing (CI's -race run of examples/sharedkv met the keeper's Close
// closing the descriptors a rejoin was reading: a donation then could send closed descriptors,
// or numbers reused by other files).
func TestDonateRacingClose(t *testing.T) {
	fd, err := unix.MemfdCreate("donate", unix.MFD_CLOEXEC)
	must(t, "memfd_create", err)
	sp := &space{fds: []int{fd}}
	sending, release := make(chan struct{}), make(chan struct{})
	donated := make(chan error, 1)
	go func() {
		_, err := sp.donate(func(fds []int) error {
			close(sending)
			<-release
			var st unix.Stat_t
			return unix.Fstat(fds[0], &st) // still this file
		})
		donated <- err
	}()
	<-sending
	closed := make(chan struct{})
	go func() { sp.close(false); close(closed) }()
	select {
	case <-closed:
		t.Fatal("the space closed its descriptors under a donation")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-donated; err != nil {
		t.Fatalf("the donation's descriptors: %v", err)
	}
	<-closed
	sent, err := sp.donate(func([]int) error { t.Fatal("a closed space donated"); return nil })
	if sent || err != nil {
		t.Fatalf("a donation after the close: sent %v, %v", sent, err)
	}
}
