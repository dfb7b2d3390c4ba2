package arena

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestZeroRefusesForeignMemory: Zero clears memory of a span in use, and refuses, clearing
// nothing, a range outside the arena (Go memory here), one running past the span's committed
// bytes, and one of a span freed since. Before, it handed any range to the provider, which
// cleared the Go memory, and would fault on a decommitted chunk's.
func TestZeroRefusesForeignMemory(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20})
	s, err := a.Alloc(64<<10, 4096)
	if err != nil {
		t.Fatal(err)
	}
	b := mem.Bytes(s.Base, 64<<10)
	for i := range b {
		b[i] = 0xAB
	}
	if err := a.Zero(s.Base+4096, 8192); err != nil {
		t.Fatalf("Zero of a span's bytes: %v", err)
	}
	if !bytes.Equal(b[4096:12288], make([]byte, 8192)) || b[4095] != 0xAB || b[12288] != 0xAB {
		t.Error("Zero did not clear exactly the range asked")
	}
	goMem := bytes.Repeat([]byte{0xCD}, 4096)
	if err := a.Zero(mem.Addr(goMem), 4096); !errors.Is(err, ErrInvalid) {
		t.Errorf("Zero of Go memory: %v, want ErrInvalid", err)
	}
	if !bytes.Equal(goMem, bytes.Repeat([]byte{0xCD}, 4096)) {
		t.Error("Zero of Go memory cleared it")
	}
	if err := a.Zero(s.Base, s.Size+DefaultChunkSize); !errors.Is(err, ErrInvalid) {
		t.Errorf("Zero past the span: %v, want ErrInvalid", err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	if err := a.Zero(s.Base, 4096); !errors.Is(err, ErrInvalid) {
		t.Errorf("Zero of a span freed: %v, want ErrInvalid", err)
	}
}

// TestZeroRefusalNotStarted: a clear refused before it began (an external device region with
// no ExternalRegion.Zero, a range Arena.Zero refuses) wrote nothing and will write nothing: its
// error wraps ErrNotStarted beside ErrInvalid, its text unchanged, so that a heap frees the
// block rather than set it aside as a clear that may still run. Before, it wrapped ErrInvalid
// only.
func TestZeroRefusalNotStarted(t *testing.T) {
	buf := make([]byte, 8192)
	reg := ExternalRegion{Base: mem.Addr(buf), Size: 8192, Kind: Device, Committed: true}
	e, err := External(reg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.Zero(mem.Addr(buf), 4096)
	if !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrInvalid) ||
		err.Error() != "arena: invalid argument: cannot clear device memory without "+
			"ExternalRegion.Zero" {
		t.Errorf("Zero of an external device region with no Zero: %v, want ErrNotStarted and "+
			"ErrInvalid, said once", err)
	}
	a := newTestArena(t, Options{Capacity: 64 << 20})
	if err := a.Zero(mem.Addr(buf), 4096); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Zero of Go memory: %v, want ErrNotStarted", err)
	}
	if NotStarted(nil) != nil {
		t.Error("NotStarted(nil) is not nil")
	}
}
