//go:build cgo && linux

package cuda

import "testing"

// TestReapRacingCloseKeepsNoDevice: a reap that takes a Device's let-go events, and finds the
// Device closed when it destroys them (a Close ran between, after closeTaints found none),
// gives them back naming no Device. Before, it gave them back naming the closed Device, which
// they then kept in memory, as closeTaints had stopped them doing.
func TestReapRacingCloseKeepsNoDevice(t *testing.T) {
	_, d := openFake(t)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	taint(ev, d, 0)
	if !untaint(ev) {
		t.Fatal("the tainted event was not let go")
	}
	reapTook = func() { must(t, "Close", d.Close()) }
	defer func() { reapTook = nil }()
	seq := taints.seq.Load()
	d.reapLetGo(0, seq)
	reapTook = nil
	taints.mu.Lock()
	var named, left int
	for _, l := range taints.let {
		if l.ev == ev {
			left++
			if l.d == d {
				named++
			}
		}
	}
	taints.mu.Unlock()
	if left != 1 || named != 0 {
		t.Errorf("after a reap racing Close: the event let go %d times, %d naming the closed "+
			"Device; want once, naming none", left, named)
	}
	dropTaint(ev) // the test fake forgets it with the context
}
