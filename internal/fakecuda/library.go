package fakecuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Library compiles the fake driver with the C compiler ($CC, else gcc) into dir and returns
// the path of the library, named libcuda.so.1. A program points internal/cuda at it by
// setting cuda.LibraryEnv to that path before its first driver call (ExecOnFake does this).
func Library(dir string) (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("fakecuda: no C compiler to build the fake driver: %w", err)
	}
	src, lib := filepath.Join(dir, "fakedriver.c"), filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(src, []byte(Source), 0o644); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("fakecuda: building the fake driver: %w\n%s", err, out)
	}
	return lib, nil
}

// ExecOnFake runs the running program again, with the same arguments and standard streams, in
// a child process whose cuda.LibraryEnv points at the fake driver compiled into a temporary
// directory (removed when the child ends). It is for programs (the examples, the benchmark
// suite) that run on the fake where no CUDA driver can be loaded: since internal/cuda loads
// its driver once per process, the choice is made by starting a new one. It returns the
// child's exit code; err is set only when the child could not be run at all. A program should
// call it only where cuda.LibraryEnv is not set already, so that it cannot recurse.
func ExecOnFake() (int, error) {
	if os.Getenv(cuda.LibraryEnv) != "" {
		return 0, fmt.Errorf("fakecuda: %s is already set: not starting another child", cuda.LibraryEnv)
	}
	dir, err := os.MkdirTemp("", "pinmalloc-fakecuda-*")
	if err != nil {
		return 0, fmt.Errorf("fakecuda: %w", err)
	}
	defer os.RemoveAll(dir)
	lib, err := Library(dir)
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
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("fakecuda: %w", err)
	}
	return 0, nil
}

// IsFake reports whether dev is the fake driver's device (its name is "Fake GPU n").
func IsFake(dev *cuda.Device) bool {
	name, err := dev.Name()
	return err == nil && len(name) >= 8 && name[:8] == "Fake GPU"
}
