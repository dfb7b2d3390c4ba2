package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// small are flags that keep a run to a fraction of a second on the fake: a 4 MiB budget,
// blocks of 16 KiB, sequences of 32 to 128 tokens.
var small = []string{"-budget", "4194304", "-token-bytes", "1024", "-block-tokens", "16",
	"-min-len", "32", "-max-len", "128", "-prompt", "24", "-batch", "4", "-steps", "150"}

// figure returns the float of the first group of re in out, failing the test if absent.
func figure(t *testing.T, out, re string) float64 {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in the output:\n%s", re, out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%q: %v", m[0], err)
	}
	return v
}

// TestRunOnFake runs the example on the fake driver at 1.5×, 2× and 4× with both policies and
// checks what it prints: that it says it runs on the fake, that the cache was kept at its
// oversubscription, that blocks migrated both ways, and that it verified every byte and the
// tier's accounting. The fake must have nothing live once the run is over (cudatest checks).
func TestRunOnFake(t *testing.T) {
	if dev, _ := cudatest.Device(t); dev == nil {
		return
	}
	for _, tc := range []struct {
		oversub, policy string
	}{{"1.5", "lru"}, {"2", "2q"}, {"4", "lru"}, {"4", "2q"}} {
		t.Run(tc.oversub+"x-"+tc.policy, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"-oversub", tc.oversub, "-policy", tc.policy}, small...)
			if err := run(args, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			s := out.String()
			if !strings.Contains(s, "fake CUDA driver, NO GPU") {
				t.Errorf("the output does not say it ran on the fake driver:\n%s", s)
			}
			over, _ := strconv.ParseFloat(tc.oversub, 64)
			mean := figure(t, s, `KV bytes live: mean ([0-9.]+)×`)
			peak := figure(t, s, `peak ([0-9.]+)× the VRAM budget`)
			if peak > over+0.01 || mean < 0.9*over {
				t.Errorf("live KV bytes mean %g×, peak %g× the budget: want the cache kept at %g×", mean, peak, over)
			}
			hit := figure(t, s, `hit rate ([0-9.]+) %`)
			in := figure(t, s, `migrations: ([0-9]+) blocks in`)
			outBlocks := figure(t, s, `blocks in, ([0-9]+) out`)
			if hit <= 0 || hit >= 100 || in == 0 || outBlocks == 0 {
				t.Errorf("hit rate %g %%, %g blocks in, %g out: an oversubscribed cache must hit and miss, and move blocks both ways", hit, in, outBlocks)
			}
			if blocks := figure(t, s, `every byte of the ([0-9]+) blocks`); blocks == 0 {
				t.Errorf("no block verified:\n%s", s)
			}
			for _, want := range []string{"Acquire latency: p50 ", "accounted: ", "policy " + tc.policy} {
				if !strings.Contains(s, want) {
					t.Errorf("no %q in the output:\n%s", want, s)
				}
			}
		})
	}
}

// TestSameSeedSameRun checks that a run is determined by its flags: two runs with the same seed
// make the same accesses, so they print the same hit rate and migrations.
func TestSameSeedSameRun(t *testing.T) {
	if dev, _ := cudatest.Device(t); dev == nil {
		return
	}
	var a, b bytes.Buffer
	if err := run(small, &a); err != nil {
		t.Fatal(err)
	}
	if err := run(small, &b); err != nil {
		t.Fatal(err)
	}
	pick := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "acquires:") || strings.HasPrefix(l, "migrations:") || strings.HasPrefix(l, "verified:") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if pick(a.String()) != pick(b.String()) || pick(a.String()) == "" {
		t.Errorf("two runs with one seed differ:\n%s\n---\n%s", pick(a.String()), pick(b.String()))
	}
}

// TestGPU runs the example on device 0 of the real driver, where there is one. It skips only
// where there is no GPU (no driver, no device, or the driver loaded is pinmalloc's fake); a
// driver that loads and fails to open the device fails it.
func TestGPU(t *testing.T) {
	dev, err := cuda.Open(0)
	switch {
	case errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice):
		t.Skip(err) // the error says "cuda: no CUDA driver" and why
	case err != nil:
		t.Fatalf("the CUDA driver loads but device 0 does not open: %v", err)
	}
	defer dev.Close()
	if cudatest.IsFake(dev) {
		t.Skip("no CUDA driver: the driver loaded is pinmalloc's fake")
	}
	var out bytes.Buffer
	if err := run(append([]string{"-oversub", "3", "-policy", "2q"}, small...), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "fake") {
		t.Errorf("the real driver's run says fake:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// TestBadFlags checks that flags that cannot work are refused with an error, before any driver
// call.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-policy", "fifo"},
		{"-oversub", "0.5"},
		{"-oversub", "9"},
		{"-budget", "1000"},
		{"-steps", "0"},
		{"-batch", "-1"},
		{"-prompt", "64", "-min-len", "64"},
		{"-min-len", "100", "-max-len", "50"},
		{"-zipf", "1"},
		{"-budget", "4194304", "-max-len", "1024"}, // the longest sequence (4 MiB) needs more than half the budget
		// the cache (1 MiB) cannot hold the longest sequence (8 blocks of 64 KiB) and a new one (8 + 1)
		{"-budget", "1048576", "-oversub", "1", "-max-len", "128", "-min-len", "121", "-prompt", "120"},
		{"-no-such-flag"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q): no error", args)
		}
	}
	if _, err := parse(nil); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestRound3: latencies print with three significant digits.
func TestRound3(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{95, "95ns"}, {90111, "90.1µs"}, {53173691, "53.2ms"}, {1234567891, "1.23s"}} {
		if got := round3(c.d).String(); got != c.want {
			t.Errorf("round3(%d) = %s, want %s", c.d, got, c.want)
		}
	}
}

// TestUsage: go run ./examples/kvcache -h (the docs quote it) prints the usage and returns
// before any driver is loaded.
func TestUsage(t *testing.T) {
	if _, err := parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parse(-h): %v, want flag.ErrHelp", err)
	}
	args := os.Args
	defer func() { os.Args = args }()
	os.Args = []string{"kvcache", "-h"}
	main() // returns: log.Fatal or an exec on the fake would end the test binary
}
