package fakecuda

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// RunBenchmark is Run for a benchmark. In the benchmark process it builds the fake, runs the
// calling benchmark alone in a child process that loads it (with this run's -test.bench*,
// -test.count and -test.cpu flags), copies the child's result lines to standard output, and
// skips: the caller returns at once (nil). In the child it returns the fake's controls. b must
// be a top-level benchmark. What a benchmark measures against the fake is CPU cost: the fake's
// "device" is host memory and its copies are memmove (or nothing, with SkipData).
func RunBenchmark(b *testing.B) *Driver {
	b.Helper()
	if path := os.Getenv(childEnv); path != "" && path != noDriver {
		d, err := open(path)
		if err != nil {
			b.Fatalf("fakecuda: %v", err)
		}
		return d
	}
	if !cgoEnabled {
		b.Skip("fakecuda: built without cgo: no driver can be loaded")
	}
	if strings.Contains(b.Name(), "/") {
		b.Fatalf("fakecuda: %s is a sub-benchmark; call RunBenchmark from a top-level benchmark", b.Name())
	}
	lib := build(b)
	args := []string{"-test.run=^$", "-test.bench=^" + regexp.QuoteMeta(b.Name()) + "$"}
	for _, name := range []string{"test.benchtime", "test.benchmem", "test.count", "test.cpu", "test.timeout"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			args = append(args, "-"+name+"="+f.Value.String())
		}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cuda.LibraryEnv+"="+lib, childEnv+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("fakecuda: %s in a child process: %v\n%s", b.Name(), err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "    ") {
			fmt.Println(line)
		}
	}
	b.Skip("fakecuda: ran in a child process against the fake driver (results above: CPU cost only)")
	return nil
}
