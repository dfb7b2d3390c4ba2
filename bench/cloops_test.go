//go:build cgo

package main

import (
	"os"
	"strings"
	"testing"
)

// TestChurnSlotInC checks that the C loops draw the churn's slots as the Go loops do.
func TestChurnSlotInC(t *testing.T) {
	for _, live := range []uint64{1, 3, 1e4, 1e7} {
		for i := range uint64(10000) {
			if g, c := churnSlot(i, live), cChurnSlot(i, live); g != c || g >= live {
				t.Fatalf("operation %d of %d live: Go slot %d, C slot %d", i, live, g, c)
			}
		}
	}
}

// TestLarsonDrawInC checks that the C loops draw the larson cases' slots and sizes as the Go
// loops do.
func TestLarsonDrawInC(t *testing.T) {
	for th := range uint64(8) {
		for i := range uint64(10000) {
			if g, c := larsonDraw(th, i), cLarsonDraw(th, i); g != c {
				t.Fatalf("thread %d draw %d: Go %#x, C %#x", th, i, g, c)
			}
		}
	}
}

// TestGlibcIsGlibc: the glibc loops call libc.so.6's malloc, mimalloc loaded or not. (A
// libmimalloc.so linked before libc also exports malloc and __libc_malloc; an earlier build
// that linked it had the glibc loops call mimalloc.)
func TestGlibcIsGlibc(t *testing.T) {
	newMimalloc() // loaded first where installed: it must not take malloc over
	if im := newGlibc(); im.skip != "" {
		t.Skip(im.skip)
	}
	if o := glibcOrigin(); !strings.Contains(o, "libc.so") {
		t.Fatalf("the glibc loops call the malloc of %q, not libc.so.6's", o)
	}
}

// TestMimallocLoaded: where libmimalloc.so.2 is installed, mimalloc is found at run time, says
// which, and runs a pair. CI sets PINMALLOC_REQUIRE_MIMALLOC (it installs the library), so
// that a mimalloc gone missing fails there instead of skipping.
func TestMimallocLoaded(t *testing.T) {
	im := newMimalloc()
	if im.skip != "" {
		if os.Getenv("PINMALLOC_REQUIRE_MIMALLOC") != "" {
			t.Fatalf("PINMALLOC_REQUIRE_MIMALLOC is set and mimalloc is %s", im.skip)
		}
		t.Skip("mimalloc " + im.skip)
	}
	if !strings.HasPrefix(im.found, "mimalloc 2.") || !strings.Contains(im.found, "libmimalloc.so") {
		t.Errorf("found %q, want mimalloc's version and library", im.found)
	}
	w, err := im.pair(64)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := w.run(1000); err != nil || d <= 0 {
		t.Fatalf("1000 pairs: %v, %v", d, err)
	}
	if line := foundLine([]impl{im, {name: "x", skip: "skipped (why)"}}); !strings.Contains(line, im.found) || !strings.Contains(line, "x skipped (why)") {
		t.Errorf("foundLine %q", line)
	}
}
