// Package smaps reads what the kernel says of this process's mappings in /proc/self/smaps: the
// transparent-huge-page advice a mapping carries, which tests of the host providers check
// before the first touch (madvise leaves no other trace).
package smaps

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Path is the file read: the smaps of this process.
const Path = "/proc/self/smaps"

// ErrNoMapping is returned when no mapping of the process holds the address asked about.
var ErrNoMapping = errors.New("smaps: no mapping holds the address")

// VMFlags returns the VmFlags of the mapping holding addr ("hg" is MADV_HUGEPAGE, "nh"
// MADV_NOHUGEPAGE). The error wraps os.ErrNotExist where the kernel has no smaps, and
// ErrNoMapping where no mapping holds addr.
func VMFlags(addr uintptr) ([]string, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return vmFlags(f, addr)
}

// vmFlags reads smaps text from r: a header line ("7f00-7f80 rw-p ...") opens each mapping,
// and its "VmFlags:" line lists the flags. Lines that are neither (blank ones included) are
// passed over.
func vmFlags(r io.Reader, addr uintptr) ([]string, error) {
	sc := bufio.NewScanner(r)
	in := false
	for sc.Scan() {
		l := sc.Text()
		fields := strings.Fields(l)
		if len(fields) == 0 {
			continue
		}
		head := fields[0]
		if lo, hi, ok := strings.Cut(head, "-"); ok && !strings.HasSuffix(head, ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < b
			continue
		}
		if in && head == "VmFlags:" {
			return fields[1:], nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("smaps: %s: %w", Path, err)
	}
	return nil, fmt.Errorf("%w: %#x", ErrNoMapping, addr)
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
