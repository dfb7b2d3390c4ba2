package ipcpool

import (
	"path/filepath"
	"testing"
	"time"
)

// A donation the adopting owner refuses is counted (SharedStats.RefusedDonations): the owner
// that made a fresh pool after its wait says why it adopted none. (A refused donation cut its
// donor off and said nothing: an owner whose keeper's pool it could not take looked the same
// as one that no donor reached.) The donation here is two memfds that are no sealed pool.
func TestRefusedDonationCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	o := Options{Size: 4 << 20, Adopt: 500 * time.Millisecond, Timeout: time.Second, FallbackPageable: true}
	served := make(chan *Owner, 1)
	go func() {
		w, err := Serve(path, o)
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	var w *Owner
	t.Cleanup(func() {
		if w == nil {
			w = <-served
		}
		if w != nil {
			must(t, "owner Close", w.Close())
		}
	})
	conn := donateTo(t, path, 77, memfds(t, 4096, 2<<20))
	if m, err := readMsg(conn); err == nil {
		t.Fatalf("the owner adopted unsealed memfds: it answered %+v", m)
	}
	if w = <-served; w == nil {
		t.FailNow()
	}
	if n := w.SharedStats().RefusedDonations; n != 1 {
		t.Fatalf("an owner that refused one donation counts %d refused", n)
	}
}
