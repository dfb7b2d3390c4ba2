package nvml

import (
	"errors"
	"fmt"
	"testing"
)

// FuzzParseBusID reads any text as a PCI address: no panic, and an address taken is one that
// its own hex text, written back in the domain:bus:device.function form, reads as again.
func FuzzParseBusID(f *testing.F) {
	for _, s := range []string{
		"0000:1b:00.0", "00000001:9A:00.0", "1:2:3", "1b:00.1", "", ":", "::", ":.", "1b:00.",
		"ffffffff:ffffffff:ffffffff.ffffffff", "100000000:0:0.0", "0:1b:00.0.0", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, b, v, fn, ok := parseBusID(s)
		if !ok {
			return
		}
		again := fmt.Sprintf("%x:%x:%x.%x", d, b, v, fn)
		d2, b2, v2, fn2, ok := parseBusID(again)
		if !ok || [4]uint32{d, b, v, fn} != [4]uint32{d2, b2, v2, fn2} {
			t.Fatalf("%q read as %s, which reads as %x:%x:%x.%x %v", s, again, d2, b2, v2, fn2, ok)
		}
	})
}

// FuzzDiscoverMemory gives Discover and MemoryUsed any memory figures and NUMA node a library
// might answer: no panic; an answer taken is one a device can have (no part above the total,
// the total within an int64), anything else fails with ErrorUnknown; NUMANode gives a node in
// [0, maxNUMANodes) or none.
func FuzzDiscoverMemory(f *testing.F) {
	f.Add(uint64(80<<30), uint64(0), uint64(79<<30), uint64(1<<30), int64(0))
	f.Add(uint64(1<<63), uint64(0), uint64(0), uint64(0), int64(-1))
	f.Add(uint64(10), uint64(11), uint64(0), uint64(0), int64(1<<40))
	f.Add(^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), int64(maxNUMANodes))
	f.Fuzz(func(t *testing.T, total, reserved, free, used uint64, node int64) {
		m := Memory{Total: total, Reserved: reserved, Free: free, Used: used}
		fk := NewFakeDGXH100()
		fk.Devices[1].Memory = m
		fk.Devices[1].NUMANode = int(node)
		gpus, err := Discover(fk)
		possible := total <= 1<<63-1 && reserved <= total && free <= total && used <= total
		switch {
		case possible && err != nil:
			t.Fatalf("Discover with %+v: %v", m, err)
		case !possible && !errors.Is(err, ErrorUnknown):
			t.Fatalf("Discover with %+v = %v, want ErrorUnknown", m, err)
		case possible && (gpus[1].TotalMem != total || gpus[1].UsedMem != used):
			t.Fatalf("Discover with %+v: %+v", m, gpus[1])
		}
		if u, err := MemoryUsed(fk, 1); possible != (err == nil) || err == nil && u != used {
			t.Fatalf("MemoryUsed with %+v = %d, %v", m, u, err)
		}
		n, ok, err := NUMANode(fk, "0000:2a:00.0")
		if err != nil || ok != (node >= 0 && node < maxNUMANodes) || ok && int64(n) != node {
			t.Fatalf("NUMANode with node %d = %d, %v, %v", node, n, ok, err)
		}
		if !fk.Balanced() {
			t.Fatalf("unbalanced: %+v", fk)
		}
	})
}
