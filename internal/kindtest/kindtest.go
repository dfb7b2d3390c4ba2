// Package kindtest holds the module's error sentinels to the kinds of package pinmalloc: the
// table of every package's sentinels with its kind and the prefix of its text (Core), the check
// that each matches its kind and no other, names its package and stays distinct from the rest
// (Problems), and the walk that finds every exported Err variable of a tree of packages
// (Exported), so that a sentinel added without a kind fails a test. The module's tests use it,
// and so do those of the integration modules nested in its tree (metrics, debugpage), with
// their own sentinels added to Core. Tests only.
package kindtest

import (
	"errors"
	"fmt"
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
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/ipcpool"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Sentinel is a package's sentinel of a shared kind: its qualified name (pinned.ErrClosed), the
// error, its kind of package pinmalloc, and the prefix its text starts with ("pinned: ").
type Sentinel struct {
	Name   string
	Err    error
	Kind   error
	Prefix string
}

// Kinds are the kinds of error package pinmalloc declares.
var Kinds = []error{pinmalloc.ErrOutOfMemory, pinmalloc.ErrClosed, pinmalloc.ErrDoubleFree, pinmalloc.ErrNotOwned,
	pinmalloc.ErrInvalidSize, pinmalloc.ErrTooLarge, pinmalloc.ErrInvalidAlign, pinmalloc.ErrLiveBlocks,
	pinmalloc.ErrMemlock, pinmalloc.ErrQuota, pinmalloc.ErrInvalidStream, pinmalloc.ErrInvalid, pinmalloc.ErrBusy, pinmalloc.ErrRefused,
	pinmalloc.ErrNoDriver, pinmalloc.ErrNoDevice, pinmalloc.ErrSymbol, pinmalloc.ErrInvalidValue, pinmalloc.ErrNotSupported,
	pinmalloc.ErrInvalidHandle, pinmalloc.ErrNotReady, pinmalloc.ErrAlreadyRegistered, pinmalloc.ErrNoUCX, pinmalloc.ErrDeviceFault}

// Problems returns what is wrong with the sentinels of rows: one that does not match its kind,
// or matches another kind, or whose text lacks its prefix, or that matches another row's
// sentinel (whose errors.Is checks would then mean two things).
func Problems(rows []Sentinel) []string {
	var bad []string
	for _, k := range rows {
		for _, kind := range Kinds {
			if got := errors.Is(k.Err, kind); got != (kind == k.Kind) {
				bad = append(bad, fmt.Sprintf("errors.Is(%s, %v) = %v", k.Name, kind, got))
			}
		}
		if !strings.HasPrefix(k.Err.Error(), k.Prefix) {
			bad = append(bad, fmt.Sprintf("%s reads %q; want its package's prefix %q", k.Name, k.Err.Error(), k.Prefix))
		}
		for _, other := range rows {
			if other.Name != k.Name && errors.Is(k.Err, other.Err) {
				bad = append(bad, fmt.Sprintf("%s matches %s", k.Name, other.Name))
			}
		}
	}
	return bad
}

// Found is an exported Err variable found by Exported: Name qualified by its package's folder
// name (metrics.ErrInvalidName), in the file Path, relative to the walk's root.
type Found struct{ Name, Path string }

// Exported returns the exported variables named Err* that the non-test Go files under root
// declare, leaving out each folder for which skip (given its path relative to root) is true.
// A file in root itself is qualified by the name of root's folder.
func Exported(root string, skip func(rel string) bool) ([]Found, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var found []Found
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." && skip(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Base(filepath.Join(abs, filepath.Dir(rel)))
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
						found = append(found, Found{pkg + "." + n.Name, rel})
					}
				}
			}
		}
		return nil
	})
	return found, err
}

// CheckPackage fails t for each problem Problems finds in rows, the sentinels of the package in
// dir, checked with Core's (a sentinel must stay distinct from every other package's), and for
// each exported Err variable of the package (or of a package under dir: commands, testdata and
// hidden folders left out) that rows do not list. An integration module's tests call it.
func CheckPackage(t testing.TB, dir string, rows []Sentinel) {
	t.Helper()
	for _, p := range Problems(append(append([]Sentinel(nil), rows...), Core...)) {
		t.Error(p)
	}
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.Name] = true
	}
	found, err := Exported(dir, func(rel string) bool {
		name := filepath.Base(rel)
		return name == "cmd" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if !listed[f.Name] {
			t.Errorf("%s (%s) is not listed: give it a kind of package pinmalloc and list it", f.Name, f.Path)
		}
	}
	if len(found) < len(rows) {
		t.Errorf("found %d sentinels in %s, fewer than the %d listed: the walk is broken", len(found), dir, len(rows))
	}
}

// Core lists every sentinel of a shared kind of the module's packages (the integration modules'
// tests add their own).
var Core = []Sentinel{
	{"heap.ErrInvalidSize", heap.ErrInvalidSize, pinmalloc.ErrInvalidSize, "heap: "},
	{"heap.ErrTooLarge", heap.ErrTooLarge, pinmalloc.ErrTooLarge, "heap: "},
	{"heap.ErrInvalidAlign", heap.ErrInvalidAlign, pinmalloc.ErrInvalidAlign, "heap: "},
	{"heap.ErrOutOfMemory", heap.ErrOutOfMemory, pinmalloc.ErrOutOfMemory, "heap: "},
	{"heap.ErrDoubleFree", heap.ErrDoubleFree, pinmalloc.ErrDoubleFree, "heap: "},
	{"heap.ErrNotOwned", heap.ErrNotOwned, pinmalloc.ErrNotOwned, "heap: "},
	{"heap.ErrLiveBlocks", heap.ErrLiveBlocks, pinmalloc.ErrLiveBlocks, "heap: "},
	{"heap.ErrLent", heap.ErrLent, pinmalloc.ErrLiveBlocks, "heap: "},
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
	{"arena.ErrDecommitUnfinished", arena.ErrDecommitUnfinished, pinmalloc.ErrRefused, "arena: "},
	{"arena.ErrCapacity", arena.ErrCapacity, pinmalloc.ErrOutOfMemory, "arena: "},
	{"arena.ErrNotHostAccessible", arena.ErrNotHostAccessible, pinmalloc.ErrInvalid, "arena: "},
	{"arena.ErrReleaseRefused", arena.ErrReleaseRefused, pinmalloc.ErrRefused, "arena: "},
	{"arena.ErrNotStarted", arena.ErrNotStarted, pinmalloc.ErrRefused, "arena: "},

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
	{"pinned.ErrRefused", pinned.ErrRefused, pinmalloc.ErrRefused, "pinned: "},
	{"pinned.ErrDeviceFault", pinned.ErrDeviceFault, pinmalloc.ErrDeviceFault, "pinned: "},

	{"device.ErrInvalidStream", device.ErrInvalidStream, pinmalloc.ErrInvalidStream, "device: "},
	{"device.ErrDeviceFault", device.ErrDeviceFault, pinmalloc.ErrDeviceFault, "device: "},
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
	{"copyengine.ErrNotCalibrated", copyengine.ErrNotCalibrated, pinmalloc.ErrNotSupported, "copyengine: "},
	{"copyengine.ErrClosed", copyengine.ErrClosed, pinmalloc.ErrClosed, "copyengine: "},
	{"copyengine.ErrInvalidStream", copyengine.ErrInvalidStream, pinmalloc.ErrInvalidStream, "copyengine: "},
	{"copyengine.ErrDeviceFault", copyengine.ErrDeviceFault, pinmalloc.ErrDeviceFault, "copyengine: "},

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
	{"uvm.ErrHeldBack", uvm.ErrHeldBack, pinmalloc.ErrRefused, "uvm: "},
	{"uvm.ErrLeaked", uvm.ErrLeaked, pinmalloc.ErrRefused, "uvm: "},
	{"uvm.ErrDeviceFault", uvm.ErrDeviceFault, pinmalloc.ErrDeviceFault, "uvm: "},

	{"ipcpool.ErrStaleHandle", ipcpool.ErrStaleHandle, pinmalloc.ErrNotOwned, "ipcpool: "},
	{"ipcpool.ErrForeignHandle", ipcpool.ErrForeignHandle, pinmalloc.ErrNotOwned, "ipcpool: "},
	{"ipcpool.ErrClosed", ipcpool.ErrClosed, pinmalloc.ErrClosed, "ipcpool: "},
	{"ipcpool.ErrAttached", ipcpool.ErrAttached, pinmalloc.ErrLiveBlocks, "ipcpool: "},
	{"ipcpool.ErrPoolFull", ipcpool.ErrPoolFull, pinmalloc.ErrOutOfMemory, "ipcpool: "},
	{"ipcpool.ErrInvalidOptions", ipcpool.ErrInvalidOptions, pinmalloc.ErrInvalid, "ipcpool: "},
	{"ipcpool.ErrMemlock", ipcpool.ErrMemlock, pinmalloc.ErrMemlock, "ipcpool: "},
	{"ipcpool.ErrRefused", ipcpool.ErrRefused, pinmalloc.ErrRefused, "ipcpool: "},
	{"ipcpool.ErrProtocol", ipcpool.ErrProtocol, pinmalloc.ErrInvalid, "ipcpool: "},
	{"ipcpool.ErrServed", ipcpool.ErrServed, pinmalloc.ErrRefused, "ipcpool: "},

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
	{"remote.ErrUCX", remote.ErrUCX, pinmalloc.ErrRefused, "remote: "},
}
