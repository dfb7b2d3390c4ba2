package streamq

import (
	"strings"
	"testing"
)

// TestListsVerify: Verify accepts lists built by pushes and finds each kind of damage it
// guards against (the checks pinned's stream state made of its own lists before they moved
// here).
func TestListsVerify(t *testing.T) {
	build := func() *Lists[int] {
		ls := NewLists(nil, func(v int) Tally { return Tally{Items: 1, Bytes: int64(v), Weight: 1} }, 2)
		ls.Push(ls.Get(0x10), 4096)
		ls.PushMany(ls.Get(0x20), []int{100, 200})
		return ls
	}
	if err := build().Verify(nil); err != nil {
		t.Fatalf("sound lists: %v", err)
	}
	// With own points (an item's own point is its value), 0x20's items marked behind the
	// newest one's, borrowed.
	borrow := func(ls *Lists[int]) *List[int] {
		ls.OwnPoints(func(v int) Event { return Event(v) })
		l := ls.m[0x20]
		l.marked, l.markedT, l.open, l.openT = l.open, l.openT, nil, Tally{}
		l.ev, l.borrowed = 200, true
		return l
	}
	if ls := build(); borrow(ls) != nil && ls.Verify(nil) != nil {
		t.Fatalf("sound lists with a borrowed point: %v", ls.Verify(nil))
	}
	for what, damage := range map[string]func(ls *Lists[int]){
		"list count":  func(ls *Lists[int]) { ls.m[0x20].openT.Items++ },
		"weight":      func(ls *Lists[int]) { ls.weight.Add(1) },
		"bytes":       func(ls *Lists[int]) { ls.m[0x10].open[0]++ },
		"stray event": func(ls *Lists[int]) { ls.m[0x10].ev = 1 },
		"unmarked":    func(ls *Lists[int]) { l := ls.m[0x10]; l.marked, l.open = l.open, nil },
		"wrong key":   func(ls *Lists[int]) { ls.m[0x30] = ls.m[0x10]; ls.n.Add(1) },
		"gone":        func(ls *Lists[int]) { ls.m[0x10].gone = true },
		"streams":     func(ls *Lists[int]) { ls.n.Add(1) },
		"borrowed":    func(ls *Lists[int]) { borrow(ls).ev = 100 },
		"not own":     func(ls *Lists[int]) { borrow(ls); ls.pointOf = nil },
	} {
		ls := build()
		damage(ls)
		if err := ls.Verify(nil); err == nil || !strings.Contains(err.Error(), "invariant") {
			t.Errorf("%s: Verify says %v", what, err)
		}
	}
}
