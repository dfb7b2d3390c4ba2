package heap

import (
	"testing"
	"time"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestTryRefuses checks that TryAlloc and TryFree refuse, changing nothing and allocating
// nothing, what needs the arena or what FreeSized would refuse, and serve the rest.
func TestTryRefuses(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	a := h.Arena()
	before := a.Usage()
	if _, ok := h.TryAlloc(64); ok {
		t.Fatal("TryAlloc served a heap with no page")
	}
	if after := a.Usage(); after != before {
		t.Fatalf("a refused TryAlloc changed the arena: %+v, then %+v", before, after)
	}
	for _, n := range []uintptr{0, MaxClassSize + 1, 4 << 20} {
		if _, ok := h.TryAlloc(n); ok {
			t.Errorf("TryAlloc(%d) served", n)
		}
	}
	p, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	q, ok := h.TryAlloc(64)
	if !ok {
		t.Fatal("TryAlloc refused a class with a page")
	}
	obj, err := h.Alloc(300 << 10)
	if err != nil {
		t.Fatal(err)
	}
	var goMem [64]byte
	refused := map[string]func() bool{
		"an object page of its own":  func() bool { return h.TryFree(obj, 300<<10) },
		"a pointer to Go memory":     func() bool { return h.TryFree(uintptr(unsafe.Pointer(&goMem)), 64) },
		"an interior pointer":        func() bool { return h.TryFree(p+16, 48) },
		"the wrong size":             func() bool { return h.TryFree(p, 65) },
		"a size of 0":                func() bool { return h.TryFree(p, 0) },
		"a block never handed out":   func() bool { return h.TryFree(q+64, 64) },
		"an address beyond the heap": func() bool { return h.TryFree(^uintptr(0)&^63, 64) },
	}
	for what, f := range refused {
		if allocs := testing.AllocsPerRun(10, func() {
			if f() {
				t.Errorf("TryFree of %s freed it", what)
			}
		}); allocs != 0 {
			t.Errorf("TryFree of %s allocated %v times", what, allocs)
		}
	}
	if !h.TryFree(q, 64) {
		t.Fatal("TryFree refused a live block")
	}
	if allocs := testing.AllocsPerRun(10, func() {
		if h.TryFree(q, 64) {
			t.Error("TryFree of a freed block freed it")
		}
	}); allocs != 0 {
		t.Errorf("a refused double free allocated %v times", allocs)
	}
	if err := h.FreeSized(obj, 300<<10); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Live != 0 || st.InUse != 0 {
		t.Fatalf("stats after freeing everything: %+v", st)
	}
}

// TestTryFreeDefersRelease checks that pages TryFree empties stay until a blocking path (here
// Collect) gives them back (but the class's spare), without any arena call before, and that object
// pages freed by other goroutines wait on the pending stack through TryAlloc for Alloc to take them
// back. Then a kept object page and a kept huge object go round TryFree and TryAlloc with no arena
// call.
func TestTryFreeDefersRelease(t *testing.T) {
	// A purge delay of an hour keeps the purge timer running through the test: a kept page's
	// TryFree needs it running (keep.Tracker.IdleWaits).
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: time.Hour}, Options{})
	other, err := h.Group().NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	pages := func() int {
		for _, c := range h.Stats().Classes {
			if c.Size == 4096 {
				return c.Pages
			}
		}
		return 0
	}
	var ps []uintptr
	for range 40 { // three 64 KiB pages of 4 KiB blocks
		p, err := h.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if n := pages(); n != 3 {
		t.Fatalf("%d pages for 40 blocks of 4 KiB, want 3", n)
	}
	before := h.Arena().Usage()
	for _, p := range ps {
		if !h.TryFree(p, 4096) {
			t.Fatalf("TryFree(%#x) refused", p)
		}
	}
	if after := h.Arena().Usage(); after != before {
		t.Fatalf("TryFree changed the arena: %+v, then %+v", before, after)
	}
	if !h.deferred {
		t.Fatal("emptied pages were not left for a blocking path")
	}
	h.Collect()
	if n := pages(); n != 2 {
		t.Fatalf("%d pages after Collect, want 2 (the current page and the class's spare)", n)
	}

	obj, err := h.Alloc(300 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if other.TryFree(obj, 300<<10) {
		t.Fatal("TryFree freed another heap's object page (its owner frees those)")
	}
	if err := other.FreeSized(obj, 300<<10); err != nil { // the remote free
		t.Fatal(err)
	}
	q, ok := h.TryAlloc(4096) // collects, but leaves the object page pending
	if !ok {
		t.Fatal("TryAlloc refused a class with a page")
	}
	if h.pending.head.Load() == nil {
		t.Fatal("TryAlloc collected an object page (its free calls the arena)")
	}
	again, err := h.Alloc(300 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if again != obj {
		t.Errorf("Alloc did not reuse the object page freed remotely: %#x, then %#x", obj, again)
	}
	if err := h.Free(again); err != nil { // tracked and kept: the next frees may be TryFree's
		t.Fatal(err)
	}
	if err := h.Free(q); err != nil {
		t.Fatal(err)
	}
	huge, err := h.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(huge); err != nil {
		t.Fatal(err)
	}
	for _, n := range []uintptr{300 << 10, 3 << 20} {
		before := h.Arena().Usage()
		for range 3 {
			p, ok := h.TryAlloc(n)
			if !ok {
				t.Fatalf("TryAlloc(%d) refused a kept page", n)
			}
			if !h.TryFree(p, n) {
				t.Fatalf("TryFree(%d) refused to keep the page", n)
			}
		}
		if after := h.Arena().Usage(); after != before {
			t.Fatalf("TryAlloc and TryFree of %d bytes changed the arena: %+v, then %+v", n, before, after)
		}
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
}
