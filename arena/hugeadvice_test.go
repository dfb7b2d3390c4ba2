package arena

import (
	"errors"
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/smaps"
)

// hugeAdvice returns the transparent-huge-page advice of the mapping holding addr: "hg" for
// HugeTransparent, "nh" for HugeSmall, "" otherwise. It skips the test where the kernel has no
// smaps.
func hugeAdvice(t *testing.T, addr uintptr) string {
	t.Helper()
	adv, err := smaps.HugeAdvice(addr)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no smaps: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return adv
}

// TestHugeAdvice: each setting gives its advice before the first touch.
func TestHugeAdvice(t *testing.T) {
	for hp, want := range map[HugePages]string{HugeNone: "", HugeTransparent: "hg", HugeSmall: "nh"} {
		a := newTestArena(t, Options{Provider: PageableHost(HostOptions{HugePages: hp}), Capacity: 8 << 20})
		s, err := a.Alloc(4<<20, DefaultChunkSize)
		if err != nil {
			t.Fatal(err)
		}
		if got := hugeAdvice(t, s.Base); got != want {
			t.Errorf("%s: advice %q, want %q", hp, got, want)
		}
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
}
