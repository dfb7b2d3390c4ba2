//go:build cgo && linux

package cuda

import "testing"

// TestCloseForgetsTaintsOfDestroyedContext: the Close that destroys the primary context (its
// release the last retain, cuDevicePrimaryCtxGetState finding it inactive after) forgets the
// tainted events of the Devices closed on it, held by their owners or let go since: the
// context's destruction destroyed them. Before, they stayed tainted for the life of the process
// (a leak, and every EventTainted took the lock), and a let-go one was destroyed later by
// DestroyLetGo through another Device: whatever event the driver had given its handle since.
// While another retain keeps the context, they stay, alive.
func TestCloseForgetsTaintsOfDestroyedContext(t *testing.T) {
	dr, d := openFake(t)
	held, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	let, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	taint(held, d, 0) // its owner holds it at Close
	taint(let, d, 0)
	d2, err := openOn(dr, 0) // a second retain: the context outlives d's Close
	must(t, "openOn", err)
	must(t, "Close", d.Close())
	if !EventTainted(held) || !EventTainted(let) {
		t.Fatal("a tainted event is forgotten while its context lives (another retain holds it)")
	}
	if !untaint(let) { // its owner gives it back to a pool after the Close: let go
		t.Fatal("the tainted event was not let go")
	}
	must(t, "Close of the last retain", d2.Close())
	if EventTainted(held) {
		t.Error("the held tainted event of a destroyed context stays tainted")
	}
	if was, _ := dropTaint(let); was != notTainted {
		t.Errorf("the let-go tainted event of a destroyed context stays let go (%d)", was)
	}
	dropTaint(held)
}
