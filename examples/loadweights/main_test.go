package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// TestRun loads a file whose size is not a multiple of the chunk (the last read ends short,
// which O_DIRECT allows only at the end of the file) and checks the example's own verification
// passed. With a CUDA driver the chunks also go to the GPU and are read back.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-size", "10000000", "-chunk", "1048576", "-workers", "3", "-inflight", "2"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "checksums match") || !strings.Contains(out.String(), "in 10 chunks") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	t.Log(out.String())
}

func TestBadFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-chunk", "1000"}, &out); err == nil {
		t.Fatal("a chunk that is not a multiple of 4096 was accepted")
	}
}

// TestRunOnFakeDriver runs the example against the fake libcuda: CUDA-registered pool memory,
// copies into a device heap, and every device copy read back and compared; at cleanup cudatest
// checks that the driver holds nothing.
func TestRunOnFakeDriver(t *testing.T) {
	if dev, _ := cudatest.Device(t); dev == nil {
		return // the child process ran the test against the fake
	}
	var out bytes.Buffer
	if err := run([]string{"-size", "6000000", "-chunk", "1048576", "-workers", "2"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"pool (cuda-host)", "GPU: 6 chunks", "every device copy read back matches", "checksums match"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFakeDeviceOutOfMemory gives the fake GPU less memory than the file: run must fail with the
// driver's error and leave nothing allocated in the driver. (Found in review: the device copies
// made before the failure were not freed, so the device heap could not close.)
func TestFakeDeviceOutOfMemory(t *testing.T) {
	dev, fake := cudatest.Device(t) // at cleanup it checks that the driver holds nothing
	if dev == nil {
		return
	}
	fake.SetMemory(16 << 20)
	var out bytes.Buffer
	if err := run([]string{"-size", "40000000", "-chunk", "1048576", "-workers", "2"}, &out); err == nil {
		t.Fatalf("a 40 MB file fit a 16 MiB GPU:\n%s", out.String())
	}
}

// TestHelp: -h is not a failure (main exits 0 on flag.ErrHelp) and the usage, on stderr, names
// the bound.
func TestHelp(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := os.Stderr
	os.Stderr = f // the flag set's output, read when it prints
	var out bytes.Buffer
	err = run([]string{"-h"}, &out)
	os.Stderr = stderr
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	usage, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(usage), "(inflight + workers + 1) x chunk") {
		t.Errorf("the usage does not name the bound:\n%s", usage)
	}
}

// TestGoesOnOnlyWithoutADevice: the example goes on without a GPU only where there is none (no
// driver, no device); a driver that loads and fails (cuInit, a missing entry point, out of
// memory) fails the run, so that a broken GPU machine does not print "no GPU" and exit 0.
func TestGoesOnOnlyWithoutADevice(t *testing.T) {
	for err, want := range map[error]bool{
		fmt.Errorf("device: %w", cuda.ErrNoDriver):                 true,
		fmt.Errorf("cuda: device 0: %w", cuda.ErrNoDevice):         true,
		errors.New("cuInit: CUDA_ERROR_UNKNOWN"):                   false,
		fmt.Errorf("retain: %w", cuda.ErrOutOfMemory):              false,
		fmt.Errorf("cuDevicePrimaryCtxRetain: %w", cuda.ErrSymbol): false,
	} {
		if got := noGPU(err); got != want {
			t.Errorf("noGPU(%v) = %v, want %v", err, got, want)
		}
	}
}
