package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFuncCounterDecreases: a counter a function given to AddFunc reports below its last
// figure (a part of what it sums replaced, its own count started again) is not exported lower:
// Prometheus counters do not go down. The scrape counts on from the highest figure, adding
// what the function counts after the drop; a gauge is exported as it is.
func TestFuncCounterDecreases(t *testing.T) {
	c := New()
	figs := []Figures{
		{Allocs: 100, CommitSeconds: 2, InUse: 50},
		{Allocs: 60, CommitSeconds: 0.5, InUse: 10}, // dropped by 40 and 1.5
		{Allocs: 70, CommitSeconds: 1, InUse: 20},   // 10 and 0.5 more since
		{Allocs: 0, CommitSeconds: 1, InUse: 0},     // started again
		{Allocs: 5, CommitSeconds: 1.25, InUse: 5},
	}
	want := []struct{ allocs, secs, inUse float64 }{
		{100, 2, 50}, {100, 2, 10}, {110, 2.5, 20}, {110, 2.5, 0}, {115, 2.75, 5},
	}
	i := 0
	if err := c.AddFunc("f", Host, func() Figures { return figs[i] }); err != nil {
		t.Fatal(err)
	}
	for i = range figs {
		allocs := testutil.ToFloat64(only(c, "pinmalloc_host_allocs_total"))
		secs := testutil.ToFloat64(only(c, "pinmalloc_host_commit_seconds_total"))
		inUse := testutil.ToFloat64(only(c, "pinmalloc_host_in_use_bytes"))
		if w := want[i]; allocs != w.allocs || secs != w.secs || inUse != w.inUse {
			t.Errorf("scrape %d: allocs %v, commit seconds %v, in use %v; want %v, %v, %v",
				i, allocs, secs, inUse, w.allocs, w.secs, w.inUse)
		}
	}
	// Added again under its name, a source's counters start afresh.
	if err := c.AddFunc("f", Host, func() Figures { return Figures{Allocs: 3} }); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(only(c, "pinmalloc_host_allocs_total")); n != 3 {
		t.Errorf("added again: allocs %v, want 3", n)
	}
}

// TestFuncCounterConcurrentScrapes: two scrapes at once (two Prometheus servers, or a Gather
// beside another) may apply their reads of a function given to AddFunc in the other order than
// they read them. The older read, lower, was taken for a drop of the counter and carried on
// for good: a function whose counter only grows was then exported above its figure ever after.
func TestFuncCounterConcurrentScrapes(t *testing.T) {
	c := New()
	reads := 0
	firstRead, resume := make(chan struct{}), make(chan struct{})
	err := c.AddFunc("f", Host, func() Figures {
		reads++
		if reads == 1 { // the first scrape's read, applied after the second scrape's
			close(firstRead)
			<-resume
			return Figures{Allocs: 100}
		}
		return Figures{Allocs: 110}
	})
	if err != nil {
		t.Fatal(err)
	}
	allocs := func() float64 { return testutil.ToFloat64(only(c, "pinmalloc_host_allocs_total")) }
	first := make(chan float64)
	go func() { first <- allocs() }()
	<-firstRead
	second := allocs()
	close(resume)
	if v := <-first; v < 100 || v > 110 {
		t.Errorf("the first scrape, its read overtaken: allocs %v; want 100 to 110", v)
	}
	if second != 110 {
		t.Errorf("the second scrape: allocs %v; want 110", second)
	}
	if v := allocs(); v != 110 {
		t.Errorf("a scrape after both: allocs %v, the function's figure 110 all along", v)
	}
}
