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

// TestWrapf: Wrapf's text names the package once, and the error matches both the sentinel its
// format wraps and the error it wraps.
func TestWrapf(t *testing.T) {
	kind := errors.New("kind")
	sentinel := New(kind, "pkg: busy")
	inner := New(kind, "pkg: the synchronize failed")
	err := Wrapf("pkg: ", inner, "%w: stream %d", sentinel, 3)
	if want := "pkg: busy: stream 3: the synchronize failed"; err.Error() != want {
		t.Errorf("Wrapf: %q, want %q", err, want)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, inner) || !errors.Is(err, kind) {
		t.Errorf("Wrapf: %v matches not the sentinel, the error it wraps and their kind", err)
	}
	other := errors.New("cuda: refused")
	if want := "pkg: busy: cuda: refused"; Wrapf("pkg: ", other, "%w", sentinel).Error() != want {
		t.Errorf("Wrapf of another package's error: want %q", want)
	}
}
