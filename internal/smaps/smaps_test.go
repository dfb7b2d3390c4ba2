package smaps

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// sample is smaps text of two mappings, with a blank line and a whitespace-only line between
// them (no kernel writes those; a reader must pass them over, not index their first field).
const sample = `00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/x
Size:                328 kB
VmFlags: rd ex mr mw me dw

   
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Size:               2048 kB
VmFlags: rd wr mr mw me ac hg
`

// TestVMFlagsParses reads the flags of each mapping of sample and finds no mapping around an
// address outside both, with ErrNoMapping.
func TestVMFlagsParses(t *testing.T) {
	for _, c := range []struct {
		addr uintptr
		want []string
	}{
		{0x400000, []string{"rd", "ex", "mr", "mw", "me", "dw"}},
		{0x7f00001fffff, []string{"rd", "wr", "mr", "mw", "me", "ac", "hg"}},
	} {
		got, err := vmFlags(strings.NewReader(sample), c.addr)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("vmFlags(%#x) = %v, %v; want %v", c.addr, got, err, c.want)
		}
	}
	if _, err := vmFlags(strings.NewReader(sample), 0x7f0000200000); !errors.Is(err, ErrNoMapping) {
		t.Errorf("vmFlags past the mappings = %v, want ErrNoMapping", err)
	}
}

// TestHugeAdviceOfHeap reads this process's own smaps: a Go heap address is in a mapping.
func TestHugeAdviceOfHeap(t *testing.T) {
	b := make([]byte, 1<<20)
	if _, err := HugeAdvice(uintptr(unsafe.Pointer(&b[0]))); err != nil {
		t.Fatalf("HugeAdvice of a heap address: %v", err)
	}
	if _, err := VMFlags(0); !errors.Is(err, ErrNoMapping) {
		t.Errorf("VMFlags(0) = %v, want ErrNoMapping", err)
	}
}
