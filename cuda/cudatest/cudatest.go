// Package cudatest gives a program's tests a CUDA device without a GPU, as net/http/httptest
// gives them a server without a network: pinmalloc's fake CUDA driver, compiled from C at test
// time and loaded in place of libcuda.so.1.
//
//	func TestUpload(t *testing.T) {
//		dev, fake := cudatest.Device(t) // this test runs again in a child process on the fake
//		if dev == nil {
//			return // the parent: the child's result is this test's
//		}
//		h, err := device.New(dev, device.Options{Capacity: 64 << 20})
//		...
//		fake.Hold(true) // queued work stays pending until fake.Complete()
//	}
//
// # What the fake is
//
// The fake keeps device memory in host memory and runs every call the real driver refuses into
// the same error: a copy whose host range spans two registrations, a stream of another context,
// memory freed under queued work (which then faults, sticky, as on a GPU). Work queued on a
// stream is checked at the call but runs as late as a GPU may run it: at a synchronize, an event
// or stream query that finds it pending, or Complete. So a buffer reused before the stream that
// reads it has passed sends the wrong bytes in a test too. Device 0 is "Fake GPU 0" with 1 GiB of
// memory (SetMemory changes it) and the VMM API. Figures measured on it are memcpy's, not a GPU's.
//
// # Why a child process
//
// A process loads its CUDA driver once (package cuda, at the first Count, Open or
// DriverVersion). Device therefore runs the calling test again, alone, in a child process of the
// same test binary whose driver is the fake (cuda.LibraryEnv set to the compiled library), and
// reports the child's pass, failure or skip as the test's own. In the test process it returns
// nil, and the test returns at once; in the child it returns the device. Each test gets a fresh
// fake, so controls set in one test never leak into another, and a machine with a GPU runs the
// same tests on the fake too. Call it first in a top-level test (not a subtest).
//
// # Requirements
//
// cgo, and a C compiler ($CC, else gcc) or a fake built beforehand (the path in the environment
// variable PINMALLOC_FAKECUDA_LIB, checked against this binary's source). Without them, Device
// skips the test and says what is missing. The fake is compiled once per user and source, into
// the user's cache directory.
//
// # Programs
//
// ExecOnFake runs a program (a main package, an example) again on the fake where no driver can
// be loaded, so that a demo works on a laptop; IsFake tells the program which it got.
package cudatest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// Device runs the calling test on the fake driver and returns device 0 of the fake and its
// controls. In the test process it builds the fake, runs the test again in a child process,
// reports the child's result as the test's, and returns nil, nil: the caller returns at once.
// In the child it returns the open device. At the test's cleanup, after the cleanups registered
// later, it checks that nothing allocated through the device is still live (heaps, pools, tiers,
// streams and events left open fail the test, each named by the library call that made its
// memory or handle and the line of the test that made that call), and closes it.
//
// It skips the test when no C compiler or no cgo is available, and fails it when called from a
// subtest.
func Device(t *testing.T) (*cuda.Device, *Fake) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatal(subtestMessage(t.Name()))
	}
	if err := canBuild(); err != nil {
		t.Skipf("cudatest: %v", err)
	}
	drv := fakecuda.Run(t)
	if drv == nil {
		return nil, nil
	}
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatalf("cudatest: opening device 0 of the fake driver: %v", err)
	}
	in, err := icuda.Of(dev)
	if err != nil {
		t.Fatalf("cudatest: %v", err)
	}
	icuda.RecordSites(in)
	t.Cleanup(func() {
		leaked := leaks(in)
		if leaked != "" {
			t.Error(leaked)
		}
		if err := dev.Close(); err != nil {
			t.Errorf("cudatest: closing device 0: %v", err)
		}
		if live := drv.LiveObjects(); leaked == "" && icuda.PrimaryRetains() == 0 && len(live) != 0 {
			t.Errorf("cudatest: the fake driver holds %v at the end of the test (something was not closed or freed)", live)
		}
	})
	return dev, &Fake{t: t, d: drv}
}

// subtestMessage is Device's failure in a subtest.
func subtestMessage(name string) string {
	return "cudatest.Device: " + name + " is a subtest: call Device first in the top-level test, before t.Run " +
		"(the test runs again alone in a child process, which a subtest cannot be)"
}

// leaks says what is still live on dev at the end of a test, named by the call that made it
// and where ("device.New at upload_test.go:23 (1 VMM reservation, 1 stream)"), or "".
func leaks(dev *icuda.Device) string {
	sites, unnamed := icuda.AllLiveSites()
	if len(sites) == 0 && unnamed == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("cudatest: not closed at the end of the test (Close or Free each, or defer it, before the test returns):")
	for _, s := range sites {
		b.WriteString("\n\t" + s.String())
	}
	if unnamed > 0 {
		fmt.Fprintf(&b, "\n\t%d more made before the test's device was opened (test device: %+v)", unnamed, dev.Stats())
	}
	return b.String()
}

// canBuild says why the fake cannot be built and loaded here, or returns nil.
func canBuild() error {
	if !cgoEnabled {
		return fmt.Errorf("built without cgo (CGO_ENABLED=0, which go sets where it finds no C compiler: install gcc): no driver library can be loaded, the fake included")
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("the fake driver runs on linux only, not %s", runtime.GOOS)
	}
	if err := fakecuda.Available(); err != nil {
		// fakecuda's error says "no C compiler" in its own words: this says it once, in
		// cudatest's, wrapping the lookup's cause (exec: "gcc": executable file not found).
		if cause := errors.Unwrap(err); cause != nil {
			err = cause
		}
		return fmt.Errorf("no C compiler to build the fake CUDA driver (install gcc, or set CC) and no prebuilt one (%s): %w", fakecuda.PrebuiltEnv, err)
	}
	return nil
}

// IsFake reports whether dev is a device of pinmalloc's fake driver: its library is the fake's,
// whatever the device is called.
func IsFake(dev *cuda.Device) bool {
	in, err := icuda.Of(dev)
	return err == nil && fakecuda.IsFake(in)
}

// ExecOnFake runs the running program again, with the same arguments and standard streams, in a
// child process whose driver is the fake (compiled once per user and source into the user's
// cache directory, as for Device), and returns the child's exit code; err is set only when the
// child could not be run (built without cgo, no C compiler, or cuda.LibraryEnv set), and says
// why. It is for programs that should run where no CUDA driver is installed:
//
//	if _, err := cuda.Count(); errors.Is(err, cuda.ErrNoDriver) && os.Getenv(cuda.LibraryEnv) == "" {
//		code, err := cudatest.ExecOnFake()
//		if err != nil {
//			log.Fatal(err)
//		}
//		os.Exit(code)
//	}
//
// A process loads its driver once, so the choice needs a new process. ExecOnFake refuses to run
// when cuda.LibraryEnv is set already (the child has it set), so that it cannot recurse.
func ExecOnFake() (code int, err error) {
	if err := canBuild(); err != nil {
		return 0, cannotRun{err}
	}
	code, err = fakecuda.ExecOnFake()
	if err != nil {
		return code, cannotRun{err}
	}
	return code, nil
}

// cannotRun is ExecOnFake's error: why the child could not be run, in cudatest's words (the
// internal package's name taken off its own errors' text), wrapping the cause.
type cannotRun struct{ err error }

func (e cannotRun) Error() string {
	return "cudatest: cannot run on the fake driver: " + strings.TrimPrefix(e.err.Error(), "fakecuda: ")
}

func (e cannotRun) Unwrap() error { return e.err }
