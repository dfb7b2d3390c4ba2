package fakecuda

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// execMarker is set in the child of TestExecOnFake.
const execMarker = "PINMALLOC_FAKECUDA_EXEC_TEST"

// TestExecOnFake re-executes the test binary for this test alone through ExecOnFake: the child
// must load the fake driver and see its device.
func TestExecOnFake(t *testing.T) {
	if os.Getenv(execMarker) != "" {
		dev, err := cuda.Open(0)
		if err != nil {
			t.Fatalf("in the child: %v", err)
		}
		defer dev.Close()
		if !IsFake(dev) {
			t.Fatal("in the child: the device is not the fake's")
		}
		return
	}
	if !cgoEnabled {
		t.Skip("fakecuda: built without cgo: no driver can be loaded")
	}
	if os.Getenv(cuda.LibraryEnv) != "" {
		if _, err := ExecOnFake(); err == nil {
			t.Fatalf("ExecOnFake ran with %s set", cuda.LibraryEnv)
		}
		t.Skipf("%s is set: the child would not get a fresh driver", cuda.LibraryEnv)
	}
	t.Setenv(execMarker, "1")
	args := os.Args
	os.Args = []string{args[0], "-test.run=^TestExecOnFake$", "-test.count=1"}
	defer func() { os.Args = args }()
	code, err := ExecOnFake()
	if err != nil || code != 0 {
		t.Fatalf("the child exited with %d, %v", code, err)
	}
}

// TestIsFake: the device of the fake driver says so, named as it is or after a real GPU
// (NameEnv): the fake is known by its marker symbol, whose value is its source's hash.
func TestIsFake(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Setenv(NameEnv, "NVIDIA H200")
	}
	_, dev := RunDevice(t)
	if dev == nil {
		return
	}
	if name, err := dev.Name(); err != nil || name != "NVIDIA H200" {
		t.Fatalf("Name = %q, %v; want the name %s gives", name, err, NameEnv)
	}
	if !IsFake(dev) || !dev.Exports(cuda.FakeDriverSymbol) {
		t.Fatal("IsFake is false on the fake driver named as a GPU")
	}
}

// TestPrebuilt: a library named by PrebuiltEnv is used as the fake only when it was built from
// this binary's source (its marker holds the source's hash); any other file is refused, with
// the reason, and nothing is compiled in its place. The library is the user's cached one (the
// other tests compile it once), copied.
func TestPrebuilt(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Setenv(PrebuiltEnv, "")
	t.Setenv(cacheEnv, "")
	cached, err := Cached(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(cached)
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, src, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PrebuiltEnv, lib)
	t.Setenv("CC", "/no/such/compiler") // a prebuilt library needs none
	if err := Available(); err != nil {
		t.Fatalf("Available with a prebuilt library and no compiler: %v", err)
	}
	if got, err := Cached(t.TempDir()); err != nil || got != lib {
		t.Fatalf("Cached = %q, %v; want the prebuilt %q", got, err, lib)
	}
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(other, bytes.ReplaceAll(b, []byte(SourceHash()), bytes.Repeat([]byte("0"), len(SourceHash()))), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{other, filepath.Join(t.TempDir(), "absent.so")} {
		t.Setenv(PrebuiltEnv, bad)
		if got, err := Cached(t.TempDir()); err == nil || !strings.Contains(err.Error(), PrebuiltEnv) {
			t.Errorf("Cached with %s=%s: %q, %v; want an error naming %s", PrebuiltEnv, bad, got, err, PrebuiltEnv)
		}
	}
}

// TestCached: the fake is compiled once per source into the user's cache directory, by
// goroutines racing for it too, and again for a changed source; with the cache off, or no cache
// directory, it is compiled into the caller's directory. The compiler is a stand-in that writes
// its output and counts its runs (standInCompiler): what is cached, not what gcc makes of the
// source, is under test here (every test on the fake loads what the real compiler made).
func TestCached(t *testing.T) {
	runs := standInCompiler(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(cacheEnv, "")
	libs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range libs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			libs[i], errs[i] = Cached(t.TempDir())
		}()
	}
	wg.Wait()
	for i := range libs {
		if errs[i] != nil || libs[i] != libs[0] {
			t.Fatalf("racing Cached: %q, %v; want %q", libs[i], errs[i], libs[0])
		}
	}
	first, err := os.Stat(libs[0])
	if err != nil {
		t.Fatal(err)
	}
	compiled := runs()
	if compiled < 1 || compiled > 2 {
		t.Fatalf("two racing Cached ran the compiler %d times, want 1 or 2", compiled)
	}
	if again, err := Cached(t.TempDir()); err != nil || again != libs[0] {
		t.Fatalf("Cached again: %q, %v; want %q", again, err, libs[0])
	} else if st, _ := os.Stat(again); !os.SameFile(first, st) || !st.ModTime().Equal(first.ModTime()) || runs() != compiled {
		t.Fatal("Cached compiled the same source again")
	}
	if entries, _ := os.ReadDir(filepath.Dir(libs[0])); len(entries) != 1 {
		t.Fatalf("the cache holds %d entries, want the library alone", len(entries))
	}
	old := time.Now().Add(-cacheAge - time.Hour)
	if err := os.Chtimes(filepath.Dir(libs[0]), old, old); err != nil {
		t.Fatal(err)
	}
	src := Source
	Source += "\n/* changed */\n"
	changed, err := Cached(t.TempDir())
	Source = src
	if err != nil || changed == libs[0] {
		t.Fatalf("Cached of a changed source: %q, %v; want a library of its own", changed, err)
	}
	if _, err := os.Stat(libs[0]); !os.IsNotExist(err) {
		t.Fatalf("the library unused for %v is still in the cache (%v)", cacheAge, err)
	}
	dir := t.TempDir()
	t.Setenv(cacheEnv, "off")
	if off, err := Cached(dir); err != nil || filepath.Dir(off) != dir {
		t.Fatalf("Cached with the cache off: %q, %v; want a library in %s", off, err, dir)
	}
	t.Setenv(cacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if none, err := Cached(dir); err != nil || filepath.Dir(none) != dir {
		t.Fatalf("Cached without a cache directory: %q, %v; want a library in %s", none, err, dir)
	}
}

// TestStub: each stub driver loads and fails to open device 0 the way it says, with the error a
// caller can tell apart (no device: pinmalloc.ErrNoDevice; the others: not a missing driver).
func TestStub(t *testing.T) {
	if _, err := compiler(); err != nil {
		t.Skip(err)
	}
	if os.Getenv(stubMarker) != "" {
		_, err := cuda.Open(0)
		want := map[string]error{"1": nil, "2": pinmalloc.ErrSymbol, "3": pinmalloc.ErrOutOfMemory, "4": pinmalloc.ErrNoDevice}[os.Getenv(stubMarker)]
		if err == nil || errors.Is(err, pinmalloc.ErrNoDriver) || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("stub %s: Open = %v, want an error matching %v", os.Getenv(stubMarker), err, want)
		}
		if os.Getenv(stubMarker) == "1" && !strings.Contains(err.Error(), "cuInit") {
			t.Fatalf("stub 1: %v, want cuInit's error", err)
		}
		// A code the stub does not name is named by the binding's table, not misnamed by the stub.
		if _, err := cuda.Open(1); os.Getenv(stubMarker) == "3" &&
			(err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_DEVICE")) {
			t.Fatalf("stub 3: Open(1) = %v, want CUDA_ERROR_INVALID_DEVICE named", err)
		}
		if n, err := cuda.Count(); os.Getenv(stubMarker) == "4" && (n != 0 || !errors.Is(err, pinmalloc.ErrNoDevice)) {
			t.Fatalf("stub 4: Count = %d, %v, want 0 and an error matching ErrNoDevice", n, err)
		}
		return
	}
	for _, f := range []StubFault{StubInitFails, StubMissingSymbol, StubOutOfMemory, StubNoDevice} {
		lib, err := Stub(t.TempDir(), f)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestStub$", "-test.count=1")
		cmd.Env = append(os.Environ(), cuda.LibraryEnv+"="+lib, fmt.Sprintf("%s=%d", stubMarker, f))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("stub %d: %v\n%s", f, err, out)
		}
	}
	if _, err := Stub(t.TempDir(), 0); err == nil {
		t.Error("Stub(0) built something")
	}
}

// stubMarker is set in the child processes of TestStub.
const stubMarker = "PINMALLOC_FAKECUDA_STUB_TEST"

// TestSourceHash: SourceHash is the first 32 hex digits of the SHA-256 of fakedriver.c.in, the
// file as it is: scripts/gpucheck build computes it so (sha256sum) for the fake it prebuilds.
func TestSourceHash(t *testing.T) {
	b, err := os.ReadFile("fakedriver.c.in")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256(b))[:32]; SourceHash() != want {
		t.Errorf("SourceHash = %s, the file's SHA-256 begins %s", SourceHash(), want)
	}
}

// standInCompiler sets $CC to a script that writes the file its -o names and counts its runs,
// which the function it returns reads.
func standInCompiler(t *testing.T) (runs func() int) {
	t.Helper()
	dir := t.TempDir()
	cc, log := filepath.Join(dir, "cc"), filepath.Join(dir, "runs")
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n" +
		"echo run >>'" + log + "'\necho stand-in >\"$out\"\n"
	if err := os.WriteFile(cc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CC", cc)
	return func() int {
		b, _ := os.ReadFile(log)
		return bytes.Count(b, []byte("run\n"))
	}
}

// interruptMarker is set in the processes of TestExecOnFakeInterrupt.
const interruptMarker = "PINMALLOC_FAKECUDA_INTERRUPT_TEST"

// TestExecOnFakeInterrupt: an interrupt sent to a program running on the fake through
// ExecOnFake (kill -INT of the program alone) goes to its child, whose exit code the program
// returns, and the fake's temporary directory is removed: the program died of the interrupt
// and left the directory behind (an example stopped with Ctrl-C, 39 of them in /tmp).
func TestExecOnFakeInterrupt(t *testing.T) {
	switch {
	case os.Getenv(interruptMarker) != "" && os.Getenv(cuda.LibraryEnv) != "":
		// The child: ready, then ended by the interrupt as a program that handles it is.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt)
		fmt.Println("child ready")
		select {
		case <-sigs:
			os.Exit(130)
		case <-time.After(20 * time.Second):
			os.Exit(3)
		}
	case os.Getenv(interruptMarker) != "":
		// The program: its child on the fake, and the child's exit code.
		os.Args = []string{os.Args[0], "-test.run=^TestExecOnFakeInterrupt$", "-test.count=1"}
		code, err := ExecOnFake()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		os.Exit(code)
	}
	if !cgoEnabled {
		t.Skip("fakecuda: built without cgo: no driver can be loaded")
	}
	if os.Getenv(cuda.LibraryEnv) != "" {
		t.Skipf("%s is set: the child would not get a fresh driver", cuda.LibraryEnv)
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecOnFakeInterrupt$", "-test.count=1")
	cmd.Env = append(os.Environ(), interruptMarker+"=1", "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := io.ReadAtLeast(out, buf, len("child ready"))
		ready <- strings.Contains(string(buf[:n]), "child ready")
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Process.Kill()
			t.Fatalf("the child did not start: %s", stderr.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no child after a minute: %s", stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("the program exited with %d (%v), want the child's 130; stderr: %s",
			code, cmd.ProcessState, stderr.String())
	}
	left, err := filepath.Glob(filepath.Join(tmp, "pinmalloc-fakecuda-*"))
	if err != nil || len(left) > 0 {
		t.Errorf("left behind: %v, %v", left, err)
	}
}
