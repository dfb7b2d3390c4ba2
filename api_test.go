package pinmalloc_test

// The public API held to one type per idea (TestAPITypes): a size or byte count is an int, a
// device address a cuda.DevicePtr, a stream a cuda.Stream, and two exported types of the same
// name in two packages mean the same kind of thing. It reads the exported declarations of every
// public package (go doc's view: internal/, package main and tests left out) and names each
// breach with its package and declaration; the allowlists below say why each exception stands.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	// sizeName matches the names that say a declaration is a size or a byte count.
	sizeName = regexp.MustCompile(`(?i)(bytes|size|len|length|capacity|quota|mem|total)$`)
	// devAddrName matches the names that say a declaration is a device address.
	devAddrName = regexp.MustCompile(`(?i)^(dst|src|dptr|devptr)$|deviceptr|devicepointer|deviceaddr`)
	// streamName matches the names that say a declaration is a stream.
	streamName = regexp.MustCompile(`(?i)stream$`)
	// rawInts are the types a size, an address or a stream must not be in the public API.
	rawInts = map[string]bool{"uintptr": true, "uint64": true, "int64": true, "uint32": true, "uint": true}
	// figures are the struct types whose fields are figures: counters and gauges read from
	// atomic.Uint64 counters, exported to Prometheus and stats.json, all uint64 (one type for
	// every figure, which a long-running process's cumulative counts need).
	figures = regexp.MustCompile(`(Stats|Figures|Counters|Latency)$|^(Usage|Sample|Histogram|Traffic|Migration|Move)$`)
)

// apiAddressLayer are the packages whose sizes stay uintptr, with why.
var apiAddressLayer = map[string]string{
	"arena":   "the address-space layer: its sizes are added to and compared with addresses (uintptr), and custom providers implement its interfaces in those terms",
	"heap":    "allocates addresses of any memory (host or device) for the layers above, in the arena's uintptr terms",
	"cudamem": "its providers implement arena.Provider, in the arena's uintptr terms",
}

// apiSizeAllowed are declarations allowed a raw integer type for a size, an address or a
// stream, with why.
var apiSizeAllowed = map[string]string{
	"ipcpool.Handle.Offset":          "a Handle is a token passed between processes: its fields are the 64-bit words a peer sends, checked against the control region before use, and a uint64 never reads as a negative offset",
	"ipcpool.Handle.Length":          "as ipcpool.Handle.Offset",
	"remote.Transfer.Bytes()":        "package remote is being reworked for UCX in another branch; its Bytes moves to int with that work",
	"debugpage.Buffer.Addr":          "an address of a pool (host) or of a device heap (device), as stats.json shows it",
	"pinned.Sharer.DropShared(addr)": "takes a host address, which is uintptr across the module",
}

// apiSameName are the type names that exist in several packages on purpose, with why: each
// package's own kind of the same thing.
var apiSameName = map[string]string{
	"Options":        "each package's configuration, passed to its New",
	"Stats":          "each package's figures, returned by its Stats",
	"Usage":          "each package's figures read without allocating, returned by its Usage",
	"StreamDeferred": "what waits for one stream in a pool (buffers), a device heap (blocks), and the debug page's row of either",
	"Block":          "a live block as its package sees it: heap.Block, any memory by address; pinned.Block, a pool's buffer",
	"Heap":           "heap.Heap allocates addresses for one goroutine at a time; device.Heap is the device-memory allocator built on it",
	"HostOptions":    "arena.HostOptions configure a host provider; cudamem.HostOptions a CUDA host provider, which holds an arena.HostOptions",
	"Mode":           "uvm.Mode is how a block is acquired (read, write); remote.Mode how a transfer moves (read, write): both the access mode of their verb",
	"Hold":           "pinned.Hold keeps a pool's buffer, device.Hold a device heap's block, in use by work outside the allocator (package remote's transfers): a free of it waits for the last Release",
	"Handle":         "uvm.Handle names a block of a tier, ipcpool.Handle a buffer shared across processes: both the name of one allocation that a stale use is refused by",
}

// apiAllowedSeen records the apiSizeAllowed entries met, so that a stale one is reported.
var apiAllowedSeen = map[string]bool{}

func TestAPITypes(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string][]*ast.File{} // by package path
	moduleSources(t, func(path string) error {
		dir := filepath.ToSlash(filepath.Dir(path))
		if dir == "internal" || strings.HasPrefix(dir, "internal/") || strings.Contains(dir, "/internal/") || strings.HasPrefix(dir, "examples") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ignored(f) || f.Name.Name == "main" {
			return nil
		}
		if dir == "." {
			dir = rootName
		}
		files[dir] = append(files[dir], f)
		return nil
	})
	var bad []string
	owners := map[string][]string{} // exported type name → packages
	for pkg, fs := range files {
		short := pkg[strings.LastIndex(pkg, "/")+1:]
		_, layer := apiAddressLayer[short]
		for _, f := range fs {
			for _, d := range f.Decls {
				bad = append(bad, apiDecl(short, layer, d, owners)...)
			}
		}
	}
	for name, pkgs := range owners {
		if len(pkgs) > 1 && apiSameName[name] == "" {
			sort.Strings(pkgs)
			bad = append(bad, fmt.Sprintf("type %s is declared in %s: one name, two ideas? (merge them, rename one, or say why in apiSameName)", name, strings.Join(pkgs, " and ")))
		}
	}
	for where := range apiSizeAllowed {
		if !apiAllowedSeen[where] {
			t.Errorf("apiSizeAllowed lists %s, which is no longer in the API: drop it", where)
		}
	}
	for name := range apiSameName {
		if len(owners[name]) < 2 {
			t.Errorf("apiSameName lists %s, now declared in %v only: drop it", name, owners[name])
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// apiDecl checks one top-level declaration of package pkg and records its exported types.
func apiDecl(pkg string, layer bool, d ast.Decl, owners map[string][]string) []string {
	var bad []string
	check := func(where, name string, typ ast.Expr) {
		ts := exprString(typ)
		if apiSizeAllowed[where] != "" {
			apiAllowedSeen[where] = true
			return
		}
		switch {
		case devAddrName.MatchString(name) && ts != "cuda.DevicePtr" && ts != "DevicePtr" && rawInts[ts]:
			bad = append(bad, fmt.Sprintf("%s is a device address of type %s: want cuda.DevicePtr", where, ts))
		case streamName.MatchString(name) && rawInts[ts]:
			bad = append(bad, fmt.Sprintf("%s is a stream of type %s: want cuda.Stream", where, ts))
		case sizeName.MatchString(name) && rawInts[ts] && !layer:
			bad = append(bad, fmt.Sprintf("%s is a size of type %s: want int", where, ts))
		}
	}
	// params checks a function's parameters or results as where(name), and an unnamed result
	// as where() under the name unnamed.
	params := func(where string, fl *ast.FieldList, unnamed string) {
		if fl == nil {
			return
		}
		for _, fd := range fl.List {
			for _, n := range fd.Names {
				check(where+"("+n.Name+")", n.Name, fd.Type)
			}
			if len(fd.Names) == 0 && unnamed != "" {
				check(where+"()", unnamed, fd.Type)
			}
		}
	}
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		where := pkg + "." + d.Name.Name
		if d.Recv != nil {
			recv := strings.TrimPrefix(exprString(d.Recv.List[0].Type), "*")
			if i := strings.Index(recv, "["); i >= 0 {
				recv = recv[:i]
			}
			if !ast.IsExported(recv) {
				return nil
			}
			where = pkg + "." + recv + "." + d.Name.Name
		}
		params(where, d.Type.Params, "")
		// An unnamed result takes the function's name when it is the only one besides an error.
		unnamed := ""
		if r := d.Type.Results; r != nil && (len(r.List) == 1 || len(r.List) == 2 && exprString(r.List[1].Type) == "error") && len(r.List[0].Names) == 0 {
			unnamed = d.Name.Name
		}
		params(where, d.Type.Results, unnamed)
	case *ast.GenDecl:
		for _, s := range d.Specs {
			ts, ok := s.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() {
				continue
			}
			owners[ts.Name.Name] = append(owners[ts.Name.Name], pkg)
			where := pkg + "." + ts.Name.Name
			switch tt := ts.Type.(type) {
			case *ast.StructType:
				if !figures.MatchString(ts.Name.Name) {
					structFields(where, tt, check)
				}
			case *ast.InterfaceType:
				for _, m := range tt.Methods.List {
					if ft, ok := m.Type.(*ast.FuncType); ok && len(m.Names) == 1 && m.Names[0].IsExported() {
						params(where+"."+m.Names[0].Name, ft.Params, "")
						params(where+"."+m.Names[0].Name, ft.Results, "")
					}
				}
			}
		}
	}
	return bad
}

// structFields checks the exported fields of a struct.
func structFields(where string, st *ast.StructType, check func(where, name string, typ ast.Expr)) {
	for _, fd := range st.Fields.List {
		for _, n := range fd.Names {
			if n.IsExported() {
				check(where+"."+n.Name, n.Name, fd.Type)
			}
		}
	}
}

// exprString formats a type expression.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	case *ast.IndexExpr:
		return exprString(e.X) + "[" + exprString(e.Index) + "]"
	}
	return fmt.Sprintf("%T", e)
}
