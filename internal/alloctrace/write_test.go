package alloctrace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestWriterRefusesWhatReadRefuses: an alignment Read refuses (beyond 2^47, MaxBytes) or
// cannot express (not a power of two, which the format's log2 byte would turn into another)
// is refused by Alloc with ErrFormat and not recorded, nor is its free; the trace stays
// readable.
func TestWriterRefusesWhatReadRefuses(t *testing.T) {
	for _, align := range []uint64{1 << 48, 1 << 63, 3, 6, MaxBytes + 1, 1<<64 - 1} {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		if err := w.Alloc(0x1000, 64, align, 1); !errors.Is(err, ErrFormat) {
			t.Errorf("Alloc aligned to %#x: %v, want ErrFormat", align, err)
		}
		if err := w.Free(0x1000, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := w.Alloc(0x2000, 64, MaxBytes, 1); err != nil {
			t.Errorf("Alloc aligned to MaxBytes: %v", err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		evs, err := Read(&buf)
		if err != nil || len(evs) != 1 || evs[0].Align != MaxBytes || evs[0].ID != 0 {
			t.Errorf("after an alignment of %#x: %+v, %v; want one allocation aligned to 2^47",
				align, evs, err)
		}
	}
}

// TestWriterRefusesSizesReadRefuses: a size Read refuses (0, beyond MaxBytes) or one that
// takes the live bytes beyond MaxBytes is refused by Alloc with ErrFormat and not recorded,
// nor is its free; a free makes room again; the trace stays readable.
func TestWriterRefusesSizesReadRefuses(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	nop := func() error { return nil }
	for _, size := range []uint64{0, MaxBytes + 1, 1 << 60, 1<<64 - 1} {
		if err := w.Alloc(0x1000, size, 0, 1); !errors.Is(err, ErrFormat) {
			t.Errorf("Alloc of %#x bytes: %v, want ErrFormat", size, err)
		}
		if err := w.Free(0x1000, nop); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Alloc(0x1000, MaxBytes/2, 0, 1); err != nil { // allocation 0
		t.Fatal(err)
	}
	if err := w.Alloc(0x2000, MaxBytes/2+1, 0, 1); !errors.Is(err, ErrFormat) {
		t.Errorf("Alloc beyond MaxBytes live: %v, want ErrFormat", err)
	}
	if err := w.Free(0x2000, nop); err != nil { // not recorded: never allocated
		t.Fatal(err)
	}
	if err := w.Alloc(0x2000, MaxBytes/2, 0, 1); err != nil { // allocation 1: exactly MaxBytes live
		t.Fatal(err)
	}
	if err := w.Free(0x1000, nop); err != nil {
		t.Fatal(err)
	}
	if err := w.Alloc(0x3000, MaxBytes/2, 0, 1); err != nil { // allocation 2, in the room freed
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := Read(&buf)
	if err != nil || len(evs) != 4 || !evs[2].Free || evs[2].ID != 0 || evs[3].ID != 2 {
		t.Errorf("read %+v, %v; want allocations 0 and 1, the free of 0, allocation 2", evs, err)
	}
}

// FuzzWriteRead: whatever Alloc accepts, Read reads back as written: the allocations (size,
// alignment, goroutine) and frees, in order. The input is a program: per step an op byte
// (even: allocate, odd: free), then for an allocation an 8-byte size, an 8-byte alignment and
// a goroutine byte; for a free, a byte choosing the live allocation.
func FuzzWriteRead(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 1, 0})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 3})
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 9})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		0, 1, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		var want []Event
		var live []uintptr // addresses of live allocations
		ids := map[uintptr]uint64{}
		var next uint64
		for step := uintptr(1); len(in) > 0 && step < 1<<12; step++ {
			op := in[0]
			in = in[1:]
			if op%2 == 1 {
				if len(in) < 1 || len(live) == 0 {
					break
				}
				i := int(in[0]) % len(live)
				in = in[1:]
				addr := live[i]
				live = append(live[:i], live[i+1:]...)
				if err := w.Free(addr, func() error { return nil }); err != nil {
					t.Fatal(err)
				}
				want = append(want, Event{Free: true, ID: ids[addr]})
				continue
			}
			if len(in) < 17 {
				break
			}
			size := binary.LittleEndian.Uint64(in)
			align := binary.LittleEndian.Uint64(in[8:])
			g := uint64(in[16])
			in = in[17:]
			addr := step << 12
			if err := w.Alloc(addr, size, align, g); err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("Alloc refused with %v, not ErrFormat", err)
				}
				continue
			}
			want = append(want, Event{ID: next, Size: size, Align: align, Goroutine: g})
			ids[addr] = next
			next++
			live = append(live, addr)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		evs, err := Read(&buf)
		if err != nil {
			t.Fatalf("Read of what Writer wrote: %v", err)
		}
		if len(evs) != len(want) {
			t.Fatalf("read %d events, wrote %d", len(evs), len(want))
		}
		for i, e := range evs {
			e.At = 0
			if e != want[i] {
				t.Fatalf("event %d: read %+v, wrote %+v", i, e, want[i])
			}
		}
	})
}
