package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mainEnv set to 1 makes the test binary run bench's main with the arguments it is given: the
// tests run the whole program (the GPU check, its workers, its run on the fake) in a child
// process, as a user would, without building it.
const mainEnv = "PINMALLOC_BENCH_MAIN"

func TestMain(m *testing.M) {
	if inFootprintChild() { // a C allocator's footprint (cchild.go)
		os.Exit(cFootprintChild())
	}
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs bench's main in a child process with args, the environment env added to this
// process's (a variable set to "" is taken out), and returns its exit status and output.
func runMain(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	out, err := mainCmd(env, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("bench %q: %v\n%s", args, err, out)
	}
	return 0, string(out)
}

// mainCmd is bench's main as a command: this test binary with args, the environment env added to
// this process's (a variable set to "" is taken out).
func mainCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); v == "" {
			cmd.Env = withoutVar(cmd.Env, k)
		} else {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// test2jsonStandIn stands in for Go's test2json: given a command (test2json -t -p PKG CMD...),
// it runs it as a child, as test2json does; without one, it passes its input on. The stand-in
// test binaries write their events themselves.
const test2jsonStandIn = `if [ $# -gt 3 ]; then shift 3; "$@"; else exec cat; fi`

// standInBin returns a BIN folder for -gpucheck with shell scripts standing in for its
// programs: test2json, a test binary whose GPU tests skip (no GPU) and whose fake-driver twins
// of the contract tests pass, and the two examples, which say they verified every byte.
func standInBin(t *testing.T) string {
	t.Helper()
	bin, pkg := t.TempDir(), t.TempDir()
	script(t, bin, test2jsonName, test2jsonStandIn)
	script(t, bin, "pinned.test", events(cat(skipping("TestCUDAPoolCopiesMixedSizes", "no CUDA driver"), skipping("TestCUDAHostProvidersCopy", "no CUDA driver"),
		passing("TestFakePoolCopiesMixedSizes"), passing("TestFakeHostProvidersCopy"))...))
	script(t, bin, "kvcache", `echo "verified: every byte"`)
	script(t, bin, "loadweights", `echo "checksums match"`)
	manifest := "pinned.test " + pkg + " TestCUDAPoolCopiesMixedSizes,TestCUDAHostProvidersCopy\n"
	if err := os.WriteFile(filepath.Join(bin, "tests.txt"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}
