package streamcheck

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// The flags are copied into the environment, which the child process fakecuda.Run starts
// inherits (it passes no flags of its own).
var (
	flagSeed   = flag.Uint64("seed", 0, "run this seed only (env STREAMCHECK_SEED)")
	flagSteps  = flag.Int("steps", 0, "operations per seed (env STREAMCHECK_STEPS)")
	flagSeeds  = flag.Int("seeds", 0, "number of seeds, drawn at random (env STREAMCHECK_SEEDS)")
	flagLong   = flag.Duration("long", 0, "run random seeds until this much time has passed (env STREAMCHECK_DURATION)")
	flagShrink = flag.Duration("shrink", 0, "time to spend shrinking a failure (env STREAMCHECK_SHRINK, default 30s)")
)

const (
	envSeed     = "STREAMCHECK_SEED"
	envSteps    = "STREAMCHECK_STEPS"
	envSeeds    = "STREAMCHECK_SEEDS"
	envDuration = "STREAMCHECK_DURATION"
	envShrink   = "STREAMCHECK_SHRINK"
)

// ciSeeds are the seeds of the default run and of CI's; ciSteps their operations per seed in the
// long form (CI's, PINMALLOC_LONG=1, and the mutants'), a quarter of it by default. On the code
// before the fixes of issue 25, seed 1 fails on the pool quota, 15 and 51 on a tier block and
// 36 on a device block zeroed by a scrub left queued on a segment another stream took. Two
// have the legacy mix (LegacyMix: blocking streams, the legacy default stream, frees ordered
// by it alone), one the device pressure profile and one the host pressure profile; which
// mutant each catches, mutants_test.go says.
var ciSeeds = []uint64{1, 15, 36, 51, LegacyMix | 1, LegacyMix | 2, DevicePressure | 10, HostPressure | 2}

const ciSteps = 15000

// longSeeds are the seeds PINMALLOC_LONG=1 adds, each run for longSteps: eight, every
// combination of the profiles' bits once (about a minute on a quiet 2-core machine; -seeds and
// -steps, or -long, run more).
var longSeeds = func() []uint64 {
	bits := []uint64{LegacyMix, DevicePressure, HostPressure}
	var seeds []uint64
	for i := range 1 << len(bits) {
		seed := uint64(1000 + i)
		for k, b := range bits {
			if i>>k&1 != 0 {
				seed |= b
			}
		}
		seeds = append(seeds, seed)
	}
	return seeds
}()

const longSteps = 50000

// TestStreamOrder runs the model checker (see the package documentation) on the fake driver.
func TestStreamOrder(t *testing.T) {
	exportFlags(t)
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	rig := Rig{F: f, Dev: f.Open(t, 0)}
	def := ciSteps / 4
	if long() {
		def = ciSteps
	}
	if invariants.Enabled { // -race or -tags invariants: verify hooks walk the heaps after each call
		def /= 10
	}
	steps := envInt(t, envSteps, def)
	shrink := durationEnv(t, envShrink, 30*time.Second)
	seeds := ciSeeds
	random := false
	if s := os.Getenv(envSeed); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		seeds = []uint64{seed}
	} else if n := envInt(t, envSeeds, 0); n > 0 {
		seeds, random = make([]uint64, n), true
	}
	until := time.Time{}
	if d := durationEnv(t, envDuration, 0); d > 0 {
		until, random, seeds = time.Now().Add(d), true, nil
	}
	nci := len(seeds)
	if long() && !random && os.Getenv(envSeed) == "" {
		seeds = append(append([]uint64(nil), seeds...), longSeeds...)
	}
	base := uint64(time.Now().UnixNano())
	for i := 0; i < len(seeds) || !until.IsZero() && time.Now().Before(until); i++ {
		var seed uint64
		if random {
			seed = base + uint64(i)*0x9E3779B97F4A7C15
		} else {
			seed = seeds[i]
		}
		n := steps
		if i >= nci && !random {
			n = envInt(t, envSteps, longSteps*def/ciSteps)
		}
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { checkSeed(t, rig, seed, n, shrink) })
		if !ok && !until.IsZero() {
			break
		}
	}
}

// checkSeed runs one seed and, on a failure, shrinks it and reports the shortest sequence.
func checkSeed(t *testing.T, rig Rig, seed uint64, steps int, shrink time.Duration) {
	cfg := ConfigFor(seed)
	start := time.Now()
	res := Generate(rig, cfg, steps)
	t.Logf("%v: %v in %v", cfg, res.Summary(), time.Since(start).Round(time.Millisecond))
	if res.Failure == nil {
		return
	}
	f := res.Failure
	t.Errorf("seed %d failed: %v", seed, f)
	start = time.Now()
	ops, g, replays := Shrink(rig, cfg, res.Ops, f, shrink)
	t.Errorf("seed %d (%v): shrunk from %d to %d operations in %d replays (%v); it fails with\n\t%v\nreplay it with go test ./internal/streamcheck -run TestStreamOrder -seed %d; the operations:\n%s\nas a regression case:\n%s",
		seed, cfg, len(res.Ops), len(ops), replays, time.Since(start).Round(time.Millisecond), g, seed, Listing(ops), GoCode(fmt.Sprintf("seed %d", seed), cfg, ops, g.What))
}

func exportFlags(t *testing.T) {
	if *flagSeed != 0 {
		t.Setenv(envSeed, strconv.FormatUint(*flagSeed, 10))
	}
	if *flagSteps != 0 {
		t.Setenv(envSteps, strconv.Itoa(*flagSteps))
	}
	if *flagSeeds != 0 {
		t.Setenv(envSeeds, strconv.Itoa(*flagSeeds))
	}
	if *flagLong != 0 {
		t.Setenv(envDuration, flagLong.String())
	}
	if *flagShrink != 0 {
		t.Setenv(envShrink, flagShrink.String())
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, s)
	}
	return n
}

func durationEnv(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}

// TestStampPattern checks that stamp's copies write the pattern byte for byte, and nonZero's
// words find the first non-zero byte, at every length and offset around their blocks.
func TestStampPattern(t *testing.T) {
	for _, n := range []int{0, 1, 7, 255, 256, 257, 1000, 4096 + 3} {
		b := make([]byte, n)
		stamp(b, 0xdeadbeef)
		for i := range b {
			if want := byte(uint32(0xdeadbeef)>>(uint(i)%4*8)) ^ byte(i*29); b[i] != want {
				t.Fatalf("stamp of %d bytes: byte %d is %#x, want %#x", n, i, b[i], want)
			}
		}
		z := make([]byte, n)
		if i := nonZero(z); i != -1 {
			t.Fatalf("nonZero of %d zero bytes = %d", n, i)
		}
		for i := range n {
			z[i] = 1
			if got := nonZero(z); got != i {
				t.Fatalf("nonZero with byte %d of %d set = %d", i, n, got)
			}
			z[i] = 0
		}
	}
}
