package cudamem_test

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/cudamem"
)

// TestPackageUse runs the package documentation's use on the fake driver: an arena of pinned
// host memory, a buffer of it written and read as a []byte, freed, and the arena closed.
func TestPackageUse(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	prov, err := cudamem.NewHost(dev, cudamem.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := arena.New(arena.Options{Provider: prov, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := a.Alloc(4<<20, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.Bytes(sp.Base, sp.Size)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4<<20 {
		t.Fatalf("Bytes: %d bytes, want %d", len(b), 4<<20)
	}
	want := bytes.Repeat([]byte("staged for the GPU"), 1000)
	copy(b, want)
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatal("the buffer does not hold what was written")
	}
	if err := a.Free(sp); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
