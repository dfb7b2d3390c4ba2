package pinmalloc_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/kindtest"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestKinds checks that every package's sentinel of a shared kind matches that kind and no
// other, keeps a text of its own naming its package, and stays distinct from the other packages'
// sentinels of the kind (each package's errors.Is checks keep their meaning). The integration
// modules (metrics, debugpage) check theirs, against these, in their own tests.
func TestKinds(t *testing.T) {
	for _, p := range kindtest.Problems(kindtest.Core) {
		t.Error(p)
	}
}

// TestReexported checks the sentinels packages take over whole: the driver's classes in cuda
// and device, and device's out-of-memory, which is the kind itself.
func TestReexported(t *testing.T) {
	for _, s := range reexported {
		if s.got != s.want {
			t.Errorf("%s is not the module's sentinel", s.name)
		}
	}
}

// reexported lists the sentinels packages take over whole.
var reexported = []struct {
	name      string
	got, want error
}{
	{"cuda.ErrNoDriver", cuda.ErrNoDriver, pinmalloc.ErrNoDriver},
	{"cuda.ErrNoDevice", cuda.ErrNoDevice, pinmalloc.ErrNoDevice},
	{"cuda.ErrSymbol", cuda.ErrSymbol, pinmalloc.ErrSymbol},
	{"cuda.ErrInvalidValue", cuda.ErrInvalidValue, pinmalloc.ErrInvalidValue},
	{"cuda.ErrNotSupported", cuda.ErrNotSupported, pinmalloc.ErrNotSupported},
	{"cuda.ErrInvalidHandle", cuda.ErrInvalidHandle, pinmalloc.ErrInvalidHandle},
	{"cuda.ErrNotReady", cuda.ErrNotReady, pinmalloc.ErrNotReady},
	{"cuda.ErrAlreadyRegistered", cuda.ErrAlreadyRegistered, pinmalloc.ErrAlreadyRegistered},
	{"cuda.ErrCapturing", cuda.ErrCapturing, pinmalloc.ErrCapturing},
	{"cuda.ErrDeviceFault", cuda.ErrDeviceFault, pinmalloc.ErrDeviceFault},
	{"cuda.ErrOutOfMemory", cuda.ErrOutOfMemory, pinmalloc.ErrOutOfMemory},
	{"cuda.ErrClosed", cuda.ErrClosed, pinmalloc.ErrClosed},
	{"device.ErrNoDriver", device.ErrNoDriver, pinmalloc.ErrNoDriver},
	{"device.ErrNoDevice", device.ErrNoDevice, pinmalloc.ErrNoDevice},
	{"device.ErrOutOfMemory", device.ErrOutOfMemory, pinmalloc.ErrOutOfMemory},
}

// TestPoolErrors runs errors through a pool and a heap and checks that each matches the
// pool's sentinel, the heap's cause and the kind: a double free, a use after Close, a foreign
// buffer.
func TestPoolErrors(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	err = p.Free(b)
	for _, want := range []error{pinned.ErrDoubleFree, heap.ErrDoubleFree, pinmalloc.ErrDoubleFree} {
		if !errors.Is(err, want) {
			t.Errorf("double free = %v; want it to match %v", err, want)
		}
	}
	if err := p.Free(make([]byte, 64)); !errors.Is(err, pinned.ErrNotOwned) || !errors.Is(err, pinmalloc.ErrNotOwned) {
		t.Errorf("free of Go memory = %v; want pinned.ErrNotOwned and pinmalloc.ErrNotOwned", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = p.Alloc(4096)
	if !errors.Is(err, pinned.ErrClosed) || !errors.Is(err, pinmalloc.ErrClosed) || errors.Is(err, uvm.ErrClosed) {
		t.Errorf("Alloc after Close = %v; want pinned.ErrClosed and pinmalloc.ErrClosed, not uvm.ErrClosed", err)
	}

	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heap.New(a, heap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Alloc(8 << 20); !errors.Is(err, heap.ErrTooLarge) || !errors.Is(err, pinmalloc.ErrTooLarge) {
		t.Errorf("heap Alloc beyond its arena = %v; want heap.ErrTooLarge and pinmalloc.ErrTooLarge", err)
	}
	if err := h.Free(mem.Addr(make([]byte, 64))); !errors.Is(err, heap.ErrNotOwned) || !errors.Is(err, pinmalloc.ErrNotOwned) {
		t.Errorf("heap Free of Go memory = %v; want heap.ErrNotOwned and pinmalloc.ErrNotOwned", err)
	}
	if err := errors.Join(h.Close(), a.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestEverySentinelListed walks the source of every public package for its exported Err
// variables and checks that each is in kindtest.Core or in TestReexported's list, so that a
// sentinel added without a kind fails here. The integration modules' folders are walked by
// their own modules' tests, against their own lists.
func TestEverySentinelListed(t *testing.T) {
	listed := map[string]bool{}
	for _, k := range kindtest.Core {
		listed[k.Name] = true
	}
	for _, s := range reexported {
		listed[s.name] = true
	}
	found, err := kindtest.Exported(".", func(rel string) bool {
		name := filepath.Base(rel)
		return name == "internal" || name == "examples" || name == "bench" || name == "cmd" || name == "testdata" ||
			name == "vendor" || strings.HasPrefix(name, ".") || isLibraryModule(rel)
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range found {
		if filepath.Dir(f.Path) == "." {
			continue // package pinmalloc: the kinds themselves
		}
		seen++
		if !listed[f.Name] {
			t.Errorf("%s (%s) is in no list of this test: give it a kind of package pinmalloc and list it", f.Name, f.Path)
		}
	}
	if seen < len(kindtest.Core) {
		t.Errorf("found %d sentinels in the source, fewer than the %d listed: the walk is broken", seen, len(kindtest.Core))
	}
}
