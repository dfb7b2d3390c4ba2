//go:build cgo

package main

import (
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

// TestGlibcIsGlibc: the glibc loops call libc.so.6's malloc in every build. (With -tags
// mimalloc, libmimalloc.so also exports malloc and __libc_malloc, and the loops called it.)
func TestGlibcIsGlibc(t *testing.T) {
	if im := newGlibc(); im.skip != "" {
		t.Skip(im.skip)
	}
	if o := glibcOrigin(); !strings.Contains(o, "libc.so") {
		t.Fatalf("the glibc loops call the malloc of %q, not libc.so.6's", o)
	}
}
