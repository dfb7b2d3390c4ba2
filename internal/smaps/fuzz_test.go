package smaps

import (
	"errors"
	"strings"
	"testing"
)

// FuzzVMFlags reads any text as smaps: no panic, and an answer is flags or an error, never
// both, with ErrNoMapping when the text was read to its end.
func FuzzVMFlags(f *testing.F) {
	f.Add(sample, uint64(0x400000))
	f.Add("\n\n", uint64(0))
	f.Add("-\nVmFlags:\n", uint64(0))
	f.Add("0-ffffffffffffffff r\n VmFlags: hg", uint64(1<<63))
	f.Fuzz(func(t *testing.T, s string, addr uint64) {
		flags, err := vmFlags(strings.NewReader(s), uintptr(addr))
		if err != nil && (flags != nil || !errors.Is(err, ErrNoMapping) && len(s) < 1<<16) {
			t.Fatalf("vmFlags = %v, %v", flags, err)
		}
	})
}
