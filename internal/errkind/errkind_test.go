package errkind

import (
	"errors"
	"fmt"
	"testing"
)

func TestNew(t *testing.T) {
	kind := errors.New("pinmalloc: double free")
	s := New(kind, "pinned: double free")
	if !errors.Is(s, kind) || s.Error() != "pinned: double free" {
		t.Fatalf("New: %q, Is(kind) %v", s, errors.Is(s, kind))
	}
}

// TestWrap checks that the wrap says the cause's sentinel once, and matches both sentinels.
func TestWrap(t *testing.T) {
	kind := errors.New("pinmalloc: double free")
	low, high := New(kind, "heap: double free"), New(kind, "pinned: double free")
	other := errors.New("arena: memlock limit reached")
	for _, c := range []struct {
		err, cause error
		want       string
	}{
		{fmt.Errorf("%w: %#x", low, 0x7f00), low, "pinned: double free: 0x7f00"},
		{low, low, "pinned: double free"},
		{fmt.Errorf("heap: out of memory: %w: 4096 bytes", other), other, "pinned: double free: heap: out of memory: 4096 bytes"},
		{fmt.Errorf("heap: out of memory: %w", other), other, "pinned: double free: heap: out of memory"},
	} {
		got := Wrap(high, c.err, c.cause)
		if got.Error() != c.want {
			t.Errorf("Wrap(%q) = %q, want %q", c.err, got, c.want)
		}
		if !errors.Is(got, high) || !errors.Is(got, c.cause) || !errors.Is(got, c.err) {
			t.Errorf("Wrap(%q) does not match its sentinel and cause", c.err)
		}
	}
}
