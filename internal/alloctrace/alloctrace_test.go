package alloctrace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Alloc(0x1000, 100, 0, 7)
	w.Alloc(0x2000, 1<<30, 4096, 8)
	if err := w.Free(0x1000, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.Free(0x2000, func() error { return errors.New("refused") }); err == nil {
		t.Fatal("a refused free was not reported")
	}
	if err := w.Free(0x9000, func() error { return nil }); err != nil { // untraced: skipped
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := buf.Len(); n > len(Magic)+3*12 {
		t.Errorf("3 records take %d bytes", n-len(Magic))
	}
	evs, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{ID: 0, Size: 100, Goroutine: 7}, {ID: 1, Size: 1 << 30, Align: 4096, Goroutine: 8}, {Free: true, ID: 0}}
	if len(evs) != len(want) {
		t.Fatalf("events %+v", evs)
	}
	for i := range want {
		e := evs[i]
		e.At = 0
		if e != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
	var empty bytes.Buffer
	if err := NewWriter(&empty).Flush(); err != nil || empty.String() != Magic {
		t.Errorf("empty trace %q, %v", empty.String(), err)
	}
	for name, in := range map[string]string{
		"no header":   "PMTRACE0",
		"bad op":      Magic + "\x07\x00",
		"cut":         Magic + "\x01\x00",
		"free unseen": Magic + "\x02\x00\x00",
		"double free": Magic + "\x01\x00\x01\x00\x00\x02\x00\x00\x02\x00\x00",
		"zero size":   Magic + "\x01\x00\x00\x00\x00",
	} {
		if _, err := Read(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// trace encodes a trace of allocations of the given sizes, each freed at once when free is
// set, by hand: Writer refuses what Read must refuse.
func trace(t testing.TB, free bool, sizes ...uint64) []byte {
	t.Helper()
	b := []byte(Magic)
	for i, n := range sizes {
		b = binary.AppendUvarint(append(b, opAlloc, 0), n)
		b = append(b, 0, 1) // the pool's alignment, goroutine 1
		if free {
			b = binary.AppendUvarint(append(b, opFree, 0), uint64(i))
		}
	}
	return b
}

// TestReadBeyondAddressSpace: a size, an alignment or live bytes beyond the address space, and
// a time past what a Duration holds, are malformed (a replay would ask make for 1<<60 bytes, or
// loop doubling a capacity that overflows); up to the address space is accepted.
func TestReadBeyondAddressSpace(t *testing.T) {
	for name, in := range map[string][]byte{
		"size 1<<60":                   trace(t, false, 1<<60),
		"size 3<<60":                   trace(t, false, 3<<60),
		"size max":                     trace(t, false, 1<<64-1),
		"size past the space":          trace(t, false, MaxBytes+1),
		"live past the space":          trace(t, false, MaxBytes/2, MaxBytes/2, 1),
		"alignment 2^48":               []byte(Magic + "\x01\x00\x10\x30\x00"),
		"time past a Duration":         append([]byte(Magic+"\x01\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x10\x00\x00"), "\x01\x02\x10\x00\x00"...),
		"time past a Duration at once": []byte(Magic + "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x10\x00\x00"),
	} {
		if _, err := Read(bytes.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	for name, in := range map[string][]byte{
		"size of the space":          trace(t, false, MaxBytes),
		"the space, freed and again": trace(t, true, MaxBytes, MaxBytes, MaxBytes),
		"live up to the space":       trace(t, false, MaxBytes/2, MaxBytes/2),
	} {
		if _, err := Read(bytes.NewReader(in)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzRead: Read never panics and never hangs on any input (it reads each byte once), fails
// only with ErrFormat or a read error, and what it accepts keeps every promise of the format:
// sizes, alignments and live bytes within MaxBytes, times non-decreasing, frees of earlier
// allocations, each once.
func FuzzRead(f *testing.F) {
	f.Add([]byte(Magic))
	f.Add(trace(f, false, 100, 1<<30, MaxBytes/4))
	f.Add(trace(f, true, 1, MaxBytes, 4096))
	f.Add(trace(f, false, 1<<60))
	f.Add(trace(f, false, 3<<60))
	f.Add([]byte(Magic + "\x01\x00\x01\x00\x00\x02\x00\x00\x02\x00\x00"))
	f.Add([]byte(Magic + "\x01\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x10\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := Read(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error without ErrFormat: %v", err)
			}
			return
		}
		var at time.Duration
		var live uint64
		sizes := map[uint64]uint64{}
		var allocs uint64
		for i, e := range evs {
			if e.At < at {
				t.Fatalf("event %d at %v, before %v", i, e.At, at)
			}
			at = e.At
			if e.Free {
				n, ok := sizes[e.ID]
				if !ok {
					t.Fatalf("event %d frees %d, not live", i, e.ID)
				}
				delete(sizes, e.ID)
				live -= n
				continue
			}
			if e.ID != allocs || e.Size == 0 || e.Size > MaxBytes || e.Align > MaxBytes || e.Align&(e.Align-1) != 0 {
				t.Fatalf("event %d: %+v (allocation %d)", i, e, allocs)
			}
			allocs++
			sizes[e.ID] = e.Size
			if live += e.Size; live > MaxBytes {
				t.Fatalf("event %d: %d bytes live", i, live)
			}
		}
	})
}
