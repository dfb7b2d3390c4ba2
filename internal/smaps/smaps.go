// Package smaps reads what the kernel says of this process's mappings in /proc/self/smaps: the
// transparent-huge-page advice a mapping carries, which tests of the host providers check
// before the first touch (madvise leaves no other trace).
package smaps

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Path is the file read: the smaps of this process.
const Path = "/proc/self/smaps"

// VMFlags returns the VmFlags of the mapping holding addr ("hg" is MADV_HUGEPAGE, "nh"
// MADV_NOHUGEPAGE). The error wraps os.ErrNotExist where the kernel has no smaps.
func VMFlags(addr uintptr) ([]string, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		l := sc.Text()
		head := strings.Fields(l)[0]
		if lo, hi, ok := strings.Cut(head, "-"); ok && !strings.HasSuffix(head, ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < b
			continue
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			return strings.Fields(l)[1:], nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("smaps: no mapping holds %#x", addr)
}

// HugeAdvice returns the transparent-huge-page advice of the mapping holding addr: "hg" for
// madvise(MADV_HUGEPAGE), "nh" for MADV_NOHUGEPAGE, "" for none.
func HugeAdvice(addr uintptr) (string, error) {
	flags, err := VMFlags(addr)
	if err != nil {
		return "", err
	}
	for _, f := range flags {
		if f == "hg" || f == "nh" {
			return f, nil
		}
	}
	return "", nil
}
