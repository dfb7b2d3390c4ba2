package arena

import (
	"errors"
	"fmt"
	"testing"
)

// recorder is a RegionObserver that records what it is told, and refuses regions while refuse
// is set.
type recorder struct {
	live   map[uintptr]uintptr // base -> size, of the regions it was told of and not taken back
	events []string
	refuse error
}

func (r *recorder) Mapped(g *Region) error {
	if r.refuse != nil {
		return r.refuse
	}
	if _, dup := r.live[g.Base]; dup {
		return fmt.Errorf("told twice of %#x", g.Base)
	}
	r.live[g.Base] = g.Size
	r.events = append(r.events, "mapped")
	return nil
}

func (r *recorder) Unmapping(g *Region) {
	if _, ok := r.live[g.Base]; !ok {
		r.events = append(r.events, "unmapping of a region never told")
	}
	delete(r.live, g.Base)
	r.events = append(r.events, "unmapping")
}

func TestObserverSeesEveryRegion(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, RegionSize: 8 << 20})
	early := &recorder{live: map[uintptr]uintptr{}}
	if err := a.Observe(early); err != nil {
		t.Fatal(err)
	}
	s1, err := a.Alloc(4<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A second region: a span bigger than what the first has left.
	s2, err := a.Alloc(6<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(early.live) != 2 {
		t.Fatalf("observer told of %d regions, want 2", len(early.live))
	}
	// One added late is told of both at once, and each region's range covers its spans.
	late := &recorder{live: map[uintptr]uintptr{}}
	if err := a.Observe(late); err != nil {
		t.Fatal(err)
	}
	if len(late.live) != 2 {
		t.Fatalf("late observer told of %d regions, want 2", len(late.live))
	}
	for _, s := range []Span{s1, s2} {
		in := false
		for base, size := range late.live {
			in = in || s.Base >= base && s.Base+s.Size <= base+size
		}
		if !in {
			t.Errorf("span %+v lies in no region the observer was told of", s)
		}
	}
	// Unobserve takes every region back from that observer only.
	a.Unobserve(late)
	if len(late.live) != 0 || len(early.live) != 2 {
		t.Fatalf("after Unobserve: late %d regions, early %d", len(late.live), len(early.live))
	}
	for _, s := range []Span{s1, s2} {
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(early.live) != 0 {
		t.Fatalf("Close left %d regions with the observer", len(early.live))
	}
	for _, e := range append(early.events, late.events...) {
		if e != "mapped" && e != "unmapping" {
			t.Error(e)
		}
	}
	if err := a.Observe(&recorder{live: map[uintptr]uintptr{}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Observe after Close: %v, want ErrClosed", err)
	}
}

// TestObserverRefuses checks that a region an observer refuses is given back to the provider,
// fails the allocation with the observer's error, and is taken back from observers that
// accepted it; and that an Observe refused part way takes back what it was told.
func TestObserverRefuses(t *testing.T) {
	prov := &counting{Provider: PageableHost(HostOptions{})}
	a := newTestArena(t, Options{Provider: prov, Capacity: 64 << 20, RegionSize: 8 << 20})
	ok := &recorder{live: map[uintptr]uintptr{}}
	no := &recorder{live: map[uintptr]uintptr{}}
	if err := a.Observe(ok); err != nil {
		t.Fatal(err)
	}
	if err := a.Observe(no); err != nil {
		t.Fatal(err)
	}
	no.refuse = errors.New("registration refused")
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, no.refuse) {
		t.Fatalf("Alloc with a refusing observer: %v", err)
	}
	if prov.reserved != prov.released || len(ok.live) != 0 {
		t.Fatalf("refused region: %d reserved, %d released; the accepting observer holds %d", prov.reserved, prov.released, len(ok.live))
	}
	no.refuse = nil
	s, err := a.Alloc(1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	third := &recorder{live: map[uintptr]uintptr{}, refuse: errors.New("no")}
	if err := a.Observe(third); err == nil || len(third.live) != 0 {
		t.Fatalf("refusing Observe: %v, holds %d", err, len(third.live))
	}
	a.Unobserve(third) // not added: nothing happens
	if len(third.events) != 0 {
		t.Fatalf("an observer never added was told %v", third.events)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// counting counts the regions its provider reserves and releases.
type counting struct {
	Provider
	reserved, released int
}

func (c *counting) Reserve(size, al uintptr) (*Region, error) {
	r, err := c.Provider.Reserve(size, al)
	if err == nil {
		c.reserved++
	}
	return r, err
}

func (c *counting) Release(r *Region) error {
	c.released++
	return c.Provider.Release(r)
}
