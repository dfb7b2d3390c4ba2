package arena

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// vmFlags returns the VmFlags of the mapping holding addr (/proc/self/smaps: "hg" is
// MADV_HUGEPAGE, "nh" MADV_NOHUGEPAGE).
func vmFlags(t *testing.T, addr uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		l := sc.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(l)[0], "-"); ok && !strings.HasSuffix(strings.Fields(l)[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < b
			continue
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			return strings.Fields(l)[1:]
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// hugeAdvice returns the transparent-huge-page advice of the mapping holding addr: "hg" for
// HugeTransparent, "nh" for HugeSmall, "" otherwise (HugeAdvice in export_test.go).
func hugeAdvice(t *testing.T, addr uintptr) string {
	t.Helper()
	for _, f := range vmFlags(t, addr) {
		if f == "hg" || f == "nh" {
			return f
		}
	}
	return ""
}

// TestHugeAdvice: each setting gives its advice before the first touch.
func TestHugeAdvice(t *testing.T) {
	for hp, want := range map[HugePages]string{HugeNone: "", HugeTransparent: "hg", HugeSmall: "nh"} {
		a := newTestArena(t, Options{Provider: Pageable(HostOptions{HugePages: hp}), Capacity: 8 << 20})
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
