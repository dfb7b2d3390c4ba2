package fakecuda

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// PrebuiltEnv names the environment variable that gives the path of a fake driver compiled
// beforehand, for a machine without a C compiler (scripts/gpucheck build ships one with the test
// binaries). Cached returns it instead of compiling, once it has checked that the library was
// built from this binary's Source; one built from another source is an error, never used.
const PrebuiltEnv = "PINMALLOC_FAKECUDA_LIB"

// SourceHash returns the hash of Source that a library compiled from it holds in its marker
// symbol (cuda.FakeDriverSymbol).
func SourceHash() string {
	sum := sha256.Sum256([]byte(Source))
	return fmt.Sprintf("%x", sum[:16])
}

// Available says why the fake driver cannot be had here (no prebuilt library and no C
// compiler), or returns nil.
func Available() error {
	if os.Getenv(PrebuiltEnv) != "" {
		return nil
	}
	_, err := compiler()
	return err
}

// prebuilt checks the library at path: a file that holds this source's hash, the value of its
// marker symbol.
func prebuilt(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("fakecuda: the prebuilt fake driver (%s): %w", PrebuiltEnv, err)
	}
	if !bytes.HasPrefix(b, []byte("\x7fELF")) || !bytes.Contains(b, []byte(SourceHash())) {
		return "", fmt.Errorf("fakecuda: %s=%s was not built from this program's fake driver source (hash %s): rebuild it (scripts/gpucheck build)",
			PrebuiltEnv, path, SourceHash())
	}
	return path, nil
}

// Library compiles the fake driver with the C compiler ($CC, else gcc) into dir and returns
// the path of the library, named libcuda.so.1. A program points internal/cuda at it by
// setting cuda.LibraryEnv to that path before its first driver call (ExecOnFake does this).
func Library(dir string) (string, error) {
	cc, err := compiler()
	if err != nil {
		return "", err
	}
	src, lib := filepath.Join(dir, "fakedriver.c"), filepath.Join(dir, "libcuda.so.1")
	if err := compile(cc, src, lib); err != nil {
		return "", err
	}
	return lib, nil
}

// cacheEnv set to "off" makes Cached compile into a new temporary directory every time.
const cacheEnv = "PINMALLOC_FAKECUDA_CACHE"

// ccFlags are the C compiler's flags for the fake.
var ccFlags = []string{"-shared", "-fPIC", "-O1", "-Wall"}

// Cached returns the path of the fake driver compiled from Source by the C compiler ($CC, else
// gcc), compiled once per user, compiler and source: the library lives in the user's cache
// directory (os.UserCacheDir, pinmalloc/fakecuda-HASH/libcuda.so.1, HASH of the source, the
// compiler's path and its flags), made with an atomic rename, so that the tests of every package
// and every child process share one build (a compile costs about 0.7 s; the module's tests
// load the fake a few hundred times). Where there is no cache directory, or with
// PINMALLOC_FAKECUDA_CACHE=off, it compiles into a new directory under dir.
func Cached(dir string) (string, error) {
	if p := os.Getenv(PrebuiltEnv); p != "" {
		return prebuilt(p)
	}
	cc, err := compiler()
	if err != nil {
		return "", err
	}
	root, err := os.UserCacheDir()
	if err != nil || os.Getenv(cacheEnv) == "off" {
		return Library(dir)
	}
	h := sha256.New()
	for _, part := range append([]string{Source, cc, runtime.GOOS, runtime.GOARCH}, ccFlags...) { // a shared cache dir may serve other machines
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	cacheDir := filepath.Join(root, "pinmalloc", fmt.Sprintf("fakecuda-%x", h.Sum(nil)[:12]))
	lib := filepath.Join(cacheDir, "libcuda.so.1")
	if _, err := os.Stat(lib); err == nil {
		now := time.Now()
		_ = os.Chtimes(cacheDir, now, now) // in use: pruneCache keeps it
		return lib, nil
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return Library(dir)
	}
	// Compile beside the library's name and rename into place: a process that finds the
	// name finds a whole library, and two that build at once both succeed.
	tmp, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return Library(dir)
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, "libcuda.so.1")
	if err := compile(cc, filepath.Join(tmp, "fakedriver.c"), built); err != nil {
		return "", err
	}
	if err := os.Rename(built, lib); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	pruneCache(filepath.Dir(cacheDir), cacheDir)
	return lib, nil
}

// cacheAge is how long a library of another source stays in the cache unused.
const cacheAge = 7 * 24 * time.Hour

// pruneCache removes from dir the fake's libraries, other than keep, unused for cacheAge, so
// that a cache written by every edit of the source stays small.
func pruneCache(dir, keep string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if path == keep || !strings.HasPrefix(e.Name(), "fakecuda-") || err != nil || time.Since(info.ModTime()) < cacheAge {
			continue
		}
		_ = os.RemoveAll(path)
	}
}

// compiler returns the path of the C compiler, $CC or else gcc.
func compiler() (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	path, err := exec.LookPath(cc)
	if err != nil {
		return "", fmt.Errorf("fakecuda: no C compiler to build the fake driver: %w", err)
	}
	return path, nil
}

// compile writes Source to src and compiles it with cc into the shared library lib.
func compile(cc, src, lib string) error {
	if err := os.WriteFile(src, []byte(Source), 0o644); err != nil {
		return fmt.Errorf("fakecuda: %w", err)
	}
	args := append(append([]string{}, ccFlags...), `-DPINMALLOC_FAKE_SOURCE_HASH="`+SourceHash()+`"`, "-o", lib, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("fakecuda: building the fake driver: %w\n%s", err, out)
	}
	return nil
}

// ExecOnFake runs the running program again, with the same arguments and standard streams, in
// a child process whose cuda.LibraryEnv points at the fake driver compiled into a temporary
// directory (removed when the child ends). It is for programs (the examples, the benchmark
// suite) that run on the fake where no CUDA driver can be loaded: since internal/cuda loads
// its driver once per process, the choice is made by starting a new one. It returns the
// child's exit code (128 plus the signal for a child a signal ended); err is set only when the
// child could not be run at all. An interrupt or termination signal the program receives while
// the child runs is passed on to the child, whose exit ends the run as usual, the temporary
// directory removed (go run does the same); the child dies with the program (on Linux), so
// killing the program ends the run. A program should call it only where cuda.LibraryEnv is not
// set already, so that it cannot recurse.
func ExecOnFake() (int, error) {
	if os.Getenv(cuda.LibraryEnv) != "" {
		return 0, fmt.Errorf("fakecuda: %s is already set: not starting another child", cuda.LibraryEnv)
	}
	dir, err := os.MkdirTemp("", "pinmalloc-fakecuda-*")
	if err != nil {
		return 0, fmt.Errorf("fakecuda: %w", err)
	}
	defer os.RemoveAll(dir)
	lib, err := Cached(dir)
	if err != nil {
		return 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("fakecuda: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), cuda.LibraryEnv+"="+lib)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	err = runTied(cmd, func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-sigs:
					_ = cmd.Process.Signal(s) // one that exited meanwhile is Wait's to say
				case <-done:
					return
				}
			}
		}()
		defer close(done)
		return cmd.Wait()
	})
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(interface {
			Signaled() bool
			Signal() syscall.Signal
		}); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("fakecuda: %w", err)
	}
	return 0, nil
}

// IsFake reports whether dev is the fake driver's device: its library exports
// cuda.FakeDriverSymbol, whatever its devices are called (PINMALLOC_FAKECUDA_NAME may name them
// after a real GPU).
func IsFake(dev *cuda.Device) bool { return dev.IsFake() }
