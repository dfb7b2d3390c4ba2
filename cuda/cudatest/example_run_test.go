package cudatest_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The examples' tests, run. Each Example of example_test.go writes a test as a closure it never
// calls (an Example has no *testing.T); the tests here are the same code, which
// TestExampleBodies keeps the same. ExampleFake_SetHostVMM's Close could not fail as it said
// (its pool had committed nothing), and nothing ran it to see.

// TestExampleBodies: every test an Example writes is here, as TestExample<Name>, statement for
// statement.
func TestExampleBodies(t *testing.T) {
	fset := token.NewFileSet()
	parse := func(name string) *ast.File {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	code := func(n ast.Node) string {
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	runs := map[string]*ast.FuncDecl{}
	for _, d := range parse("example_run_test.go").Decls {
		if f, ok := d.(*ast.FuncDecl); ok {
			runs[f.Name.Name] = f
		}
	}
	n := 0
	for _, d := range parse("example_test.go").Decls {
		ex, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(ex.Name.Name, "Example") {
			continue
		}
		for _, st := range ex.Body.List {
			as, ok := st.(*ast.AssignStmt)
			if !ok || len(as.Rhs) != 1 {
				continue
			}
			lit, ok := as.Rhs[0].(*ast.FuncLit)
			if !ok {
				continue
			}
			name := "TestExample" + strings.TrimPrefix(as.Lhs[0].(*ast.Ident).Name, "Test")
			n++
			switch run := runs[name]; {
			case run == nil:
				t.Errorf("%s writes a test that no %s runs", ex.Name.Name, name)
			case code(lit.Body) != code(run.Body):
				t.Errorf("%s differs from the test %s writes:\n%s\nwant:\n%s",
					name, ex.Name.Name, code(run.Body), code(lit.Body))
			}
		}
	}
	if n != len(runs)-1 {
		t.Errorf("%d tests written by the examples, %d run here", n, len(runs)-1)
	}
}

// TestExampleUpload is TestUpload of Example.
func TestExampleUpload(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := dev.StreamCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer h.ForgetStream(s)

	p, err := h.Alloc(4096, s)
	if err != nil {
		t.Fatal(err)
	}
	fake.Hold(true) // the GPU is busy: what is queued stays queued
	src := bytes.Repeat([]byte{42}, 4096)
	if err := h.HtoDAsync(p, src, s); err != nil {
		t.Fatal(err)
	}
	fake.CompleteStream(s) // now it has run
	got := make([]byte, 4096)
	if err := h.DtoH(got, p); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("read back %v, %v", got[:4], err)
	}
	if err := h.FreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
}

// TestExampleRecordFails is TestRecordFails of ExampleFake_FailNext.
func TestExampleRecordFails(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p, err := h.Alloc(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.StreamCreate(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer h.ForgetStream(s)
	fake.Hold(true) // the GPU is busy: a copy stays queued on s
	defer fake.Complete()
	if err := h.HtoDAsync(p, make([]byte, 4096), s); err != nil {
		t.Fatal(err)
	}
	if err := h.FreeAsync(p, s); err != nil { // another stream's block: the free waits for s
		t.Fatal(err)
	}
	fake.FailNext(cudatest.EventRecord, cudatest.InvalidValue)
	q, err := h.Alloc(4096, s) // its poll cannot record a point on s
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free(q)
	if st := h.Stats(); st.Frees != 1 {
		t.Fatalf("%d frees done, want 1", st.Frees)
	}
}

// TestExampleCloseRefused is TestCloseRefused of ExampleFake_SetHostVMM.
func TestExampleCloseRefused(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	fake.SetHostVMM(false) // a driver before CUDA 12.2: pools register their memory
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20,
		Populate: true, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(1 << 20) // the pool reserves, pins and populates its first region
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil { // the memory stays the pool's (PurgeDelay -1)
		t.Fatal(err)
	}
	fake.FailNext(cudatest.HostUnregister, cudatest.NotPermitted)
	if err := p.Close(); err == nil {
		t.Fatal("Close whose unregistration is refused succeeded")
	}
	if p.Stats().Committed == 0 {
		t.Fatal("the memory the driver refused to unpin is gone from the pool's account")
	}
	if err := p.Close(); err != nil { // gives it back
		t.Fatal(err)
	}
}
