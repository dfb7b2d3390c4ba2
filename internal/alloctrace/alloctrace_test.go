package alloctrace

import (
	"bytes"
	"errors"
	"strings"
	"testing"
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
