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
