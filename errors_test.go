package pinmalloc_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/debugpage"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/ipcpool"
	"github.com/pinmalloc/pinmalloc/metrics"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// kinds lists every package sentinel of a shared kind, with its kind and the prefix of its text.
var kinds = []struct {
	name      string
	sentinel  error
	kind      error
	textStart string
}{
	{"heap.ErrInvalidSize", heap.ErrInvalidSize, pinmalloc.ErrInvalidSize, "heap: "},
	{"heap.ErrTooLarge", heap.ErrTooLarge, pinmalloc.ErrTooLarge, "heap: "},
	{"heap.ErrInvalidAlign", heap.ErrInvalidAlign, pinmalloc.ErrInvalidAlign, "heap: "},
	{"heap.ErrOutOfMemory", heap.ErrOutOfMemory, pinmalloc.ErrOutOfMemory, "heap: "},
	{"heap.ErrDoubleFree", heap.ErrDoubleFree, pinmalloc.ErrDoubleFree, "heap: "},
	{"heap.ErrNotOwned", heap.ErrNotOwned, pinmalloc.ErrNotOwned, "heap: "},
	{"heap.ErrLiveBlocks", heap.ErrLiveBlocks, pinmalloc.ErrLiveBlocks, "heap: "},
	{"heap.ErrClosed", heap.ErrClosed, pinmalloc.ErrClosed, "heap: "},
	{"heap.ErrInvalidArgument", heap.ErrInvalidArgument, pinmalloc.ErrInvalid, "heap: "},
	{"heap.ErrInteriorPointer", heap.ErrInteriorPointer, pinmalloc.ErrInvalid, "heap: "},
	{"heap.ErrSizeMismatch", heap.ErrSizeMismatch, pinmalloc.ErrInvalid, "heap: "},
	{"heap.ErrHeld", heap.ErrHeld, pinmalloc.ErrBusy, "heap: "},

	{"arena.ErrMemlock", arena.ErrMemlock, pinmalloc.ErrMemlock, "arena: "},
	{"arena.ErrInvalid", arena.ErrInvalid, pinmalloc.ErrInvalid, "arena: "},
	{"arena.ErrClosed", arena.ErrClosed, pinmalloc.ErrClosed, "arena: "},
	{"arena.ErrBusy", arena.ErrBusy, pinmalloc.ErrLiveBlocks, "arena: "},
	{"arena.ErrExhausted", arena.ErrExhausted, pinmalloc.ErrOutOfMemory, "arena: "},
	{"arena.ErrReserve", arena.ErrReserve, pinmalloc.ErrRefused, "arena: "},
	{"arena.ErrCommit", arena.ErrCommit, pinmalloc.ErrRefused, "arena: "},
	{"arena.ErrCapacity", arena.ErrCapacity, pinmalloc.ErrOutOfMemory, "arena: "},
	{"arena.ErrNotHostAccessible", arena.ErrNotHostAccessible, pinmalloc.ErrInvalid, "arena: "},

	{"pinned.ErrInvalidSize", pinned.ErrInvalidSize, pinmalloc.ErrInvalidSize, "pinned: "},
	{"pinned.ErrTooLarge", pinned.ErrTooLarge, pinmalloc.ErrTooLarge, "pinned: "},
	{"pinned.ErrInvalidAlign", pinned.ErrInvalidAlign, pinmalloc.ErrInvalidAlign, "pinned: "},
	{"pinned.ErrOutOfMemory", pinned.ErrOutOfMemory, pinmalloc.ErrOutOfMemory, "pinned: "},
	{"pinned.ErrDoubleFree", pinned.ErrDoubleFree, pinmalloc.ErrDoubleFree, "pinned: "},
	{"pinned.ErrNotOwned", pinned.ErrNotOwned, pinmalloc.ErrNotOwned, "pinned: "},
	{"pinned.ErrLiveBlocks", pinned.ErrLiveBlocks, pinmalloc.ErrLiveBlocks, "pinned: "},
	{"pinned.ErrClosed", pinned.ErrClosed, pinmalloc.ErrClosed, "pinned: "},
	{"pinned.ErrMemlock", pinned.ErrMemlock, pinmalloc.ErrMemlock, "pinned: "},
	{"pinned.ErrInvalidOptions", pinned.ErrInvalidOptions, pinmalloc.ErrInvalid, "pinned: "},
	{"pinned.ErrQuota", pinned.ErrQuota, pinmalloc.ErrQuota, "pinned: "},
	{"pinned.ErrInvalidStream", pinned.ErrInvalidStream, pinmalloc.ErrInvalidStream, "pinned: "},
	{"pinned.ErrSubSlice", pinned.ErrSubSlice, pinmalloc.ErrInvalid, "pinned: "},
	{"pinned.ErrNoDriver", pinned.ErrNoDriver, pinmalloc.ErrNoDriver, "pinned: "},
	{"pinned.ErrTrace", pinned.ErrTrace, pinmalloc.ErrInvalid, "pinned: "},
	{"pinned.ErrBusy", pinned.ErrBusy, pinmalloc.ErrBusy, "pinned: "},

	{"device.ErrInvalidStream", device.ErrInvalidStream, pinmalloc.ErrInvalidStream, "device: "},
	{"device.ErrClosed", device.ErrClosed, pinmalloc.ErrClosed, "device: "},
	{"device.ErrInvalidOptions", device.ErrInvalidOptions, pinmalloc.ErrInvalid, "device: "},
	{"device.ErrNotOwned", device.ErrNotOwned, pinmalloc.ErrNotOwned, "device: "},
	{"device.ErrQuota", device.ErrQuota, pinmalloc.ErrQuota, "device: "},
	{"device.ErrBusy", device.ErrBusy, pinmalloc.ErrBusy, "device: "},
	{"device.ErrOutOfBounds", device.ErrOutOfBounds, pinmalloc.ErrInvalid, "device: "},
	{"device.ErrInPressureHook", device.ErrInPressureHook, pinmalloc.ErrOutOfMemory, "device: "},

	{"copyengine.ErrInvalidOptions", copyengine.ErrInvalidOptions, pinmalloc.ErrInvalid, "copyengine: "},
	{"copyengine.ErrInvalidJob", copyengine.ErrInvalidJob, pinmalloc.ErrInvalid, "copyengine: "},
	{"copyengine.ErrOverlap", copyengine.ErrOverlap, pinmalloc.ErrInvalid, "copyengine: "},
	{"copyengine.ErrMethodUnsupported", copyengine.ErrMethodUnsupported, pinmalloc.ErrNotSupported, "copyengine: "},
	{"copyengine.ErrClosed", copyengine.ErrClosed, pinmalloc.ErrClosed, "copyengine: "},

	{"uvm.ErrClosed", uvm.ErrClosed, pinmalloc.ErrClosed, "uvm: "},
	{"uvm.ErrTooLarge", uvm.ErrTooLarge, pinmalloc.ErrTooLarge, "uvm: "},
	{"uvm.ErrHostFull", uvm.ErrHostFull, pinmalloc.ErrOutOfMemory, "uvm: "},
	{"uvm.ErrInvalidOptions", uvm.ErrInvalidOptions, pinmalloc.ErrInvalid, "uvm: "},
	{"uvm.ErrInvalidStream", uvm.ErrInvalidStream, pinmalloc.ErrInvalidStream, "uvm: "},
	{"uvm.ErrInvalidHandle", uvm.ErrInvalidHandle, pinmalloc.ErrNotOwned, "uvm: "},
	{"uvm.ErrNotAcquired", uvm.ErrNotAcquired, pinmalloc.ErrInvalid, "uvm: "},
	{"uvm.ErrWrongStream", uvm.ErrWrongStream, pinmalloc.ErrInvalid, "uvm: "},
	{"uvm.ErrAcquired", uvm.ErrAcquired, pinmalloc.ErrBusy, "uvm: "},
	{"uvm.ErrAllPinned", uvm.ErrAllPinned, pinmalloc.ErrBusy, "uvm: "},

	{"ipcpool.ErrStaleHandle", ipcpool.ErrStaleHandle, pinmalloc.ErrNotOwned, "ipcpool: "},
	{"ipcpool.ErrForeignHandle", ipcpool.ErrForeignHandle, pinmalloc.ErrNotOwned, "ipcpool: "},
	{"ipcpool.ErrClosed", ipcpool.ErrClosed, pinmalloc.ErrClosed, "ipcpool: "},
	{"ipcpool.ErrAttached", ipcpool.ErrAttached, pinmalloc.ErrLiveBlocks, "ipcpool: "},
	{"ipcpool.ErrPoolFull", ipcpool.ErrPoolFull, pinmalloc.ErrOutOfMemory, "ipcpool: "},
	{"ipcpool.ErrInvalidOptions", ipcpool.ErrInvalidOptions, pinmalloc.ErrInvalid, "ipcpool: "},
	{"ipcpool.ErrMemlock", ipcpool.ErrMemlock, pinmalloc.ErrMemlock, "ipcpool: "},
	{"ipcpool.ErrRefused", ipcpool.ErrRefused, pinmalloc.ErrRefused, "ipcpool: "},
	{"ipcpool.ErrProtocol", ipcpool.ErrProtocol, pinmalloc.ErrInvalid, "ipcpool: "},

	{"remote.ErrNoUCX", remote.ErrNoUCX, pinmalloc.ErrNoUCX, "remote: "},
	{"remote.ErrClosed", remote.ErrClosed, pinmalloc.ErrClosed, "remote: "},
	{"remote.ErrDescriptor", remote.ErrDescriptor, pinmalloc.ErrInvalid, "remote: "},
	{"remote.ErrOutOfRange", remote.ErrOutOfRange, pinmalloc.ErrInvalid, "remote: "},
	{"remote.ErrNotRegistered", remote.ErrNotRegistered, pinmalloc.ErrNotOwned, "remote: "},
	{"remote.ErrPeer", remote.ErrPeer, pinmalloc.ErrRefused, "remote: "},
	{"remote.ErrBusy", remote.ErrBusy, pinmalloc.ErrBusy, "remote: "},
	{"remote.ErrNotSupported", remote.ErrNotSupported, pinmalloc.ErrInvalid, "remote: "},
	{"remote.ErrTooLarge", remote.ErrTooLarge, pinmalloc.ErrTooLarge, "remote: "},
	{"remote.ErrProtocol", remote.ErrProtocol, pinmalloc.ErrRefused, "remote: "},

	{"metrics.ErrInvalidName", metrics.ErrInvalidName, pinmalloc.ErrInvalid, "metrics: "},
	{"debugpage.ErrSnapshot", debugpage.ErrSnapshot, pinmalloc.ErrInvalid, "debugpage: "},
	{"debugpage.ErrFrozen", debugpage.ErrFrozen, pinmalloc.ErrInvalid, "debugpage: "},
	{"debugpage.ErrInvalidName", debugpage.ErrInvalidName, pinmalloc.ErrInvalid, "debugpage: "},
}

// TestKinds checks that every package's sentinel of a shared kind matches that kind and no
// other, keeps a text of its own naming its package, and stays distinct from the other packages'
// sentinels of the kind (each package's errors.Is checks keep their meaning).
func TestKinds(t *testing.T) {
	all := []error{pinmalloc.ErrOutOfMemory, pinmalloc.ErrClosed, pinmalloc.ErrDoubleFree, pinmalloc.ErrNotOwned,
		pinmalloc.ErrInvalidSize, pinmalloc.ErrTooLarge, pinmalloc.ErrInvalidAlign, pinmalloc.ErrLiveBlocks,
		pinmalloc.ErrMemlock, pinmalloc.ErrQuota, pinmalloc.ErrInvalidStream, pinmalloc.ErrInvalid, pinmalloc.ErrBusy, pinmalloc.ErrRefused,
		pinmalloc.ErrNoDriver, pinmalloc.ErrNoDevice, pinmalloc.ErrSymbol, pinmalloc.ErrInvalidValue, pinmalloc.ErrNotSupported,
		pinmalloc.ErrInvalidHandle, pinmalloc.ErrNotReady, pinmalloc.ErrAlreadyRegistered, pinmalloc.ErrNoUCX}
	for _, k := range kinds {
		for _, kind := range all {
			if got := errors.Is(k.sentinel, kind); got != (kind == k.kind) {
				t.Errorf("errors.Is(%s, %v) = %v", k.name, kind, got)
			}
		}
		if !strings.HasPrefix(k.sentinel.Error(), k.textStart) {
			t.Errorf("%s reads %q; want its package's prefix %q", k.name, k.sentinel.Error(), k.textStart)
		}
		for _, other := range kinds {
			if other.name != k.name && errors.Is(k.sentinel, other.sentinel) {
				t.Errorf("%s matches %s", k.name, other.name)
			}
		}
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
// variables and checks that each is in kinds or in TestReexported's list, so that a sentinel
// added without a kind fails here.
func TestEverySentinelListed(t *testing.T) {
	listed := map[string]bool{}
	for _, k := range kinds {
		listed[k.name] = true
	}
	for _, s := range reexported {
		listed[s.name] = true
	}
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "internal" || name == "examples" || name == "bench" ||
				name == "cmd" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == "." {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
						seen++
						if name := filepath.Base(filepath.Dir(path)) + "." + n.Name; !listed[name] {
							t.Errorf("%s (%s) is in no list of this test: give it a kind of package pinmalloc and list it", name, path)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(kinds) {
		t.Errorf("found %d sentinels in the source, fewer than the %d listed: the walk is broken", seen, len(kinds))
	}
}
