package fakecuda

import (
	"os"
	"testing"

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

// TestIsFake: the device of the fake driver says so.
func TestIsFake(t *testing.T) {
	_, dev := RunDevice(t)
	if dev == nil {
		return
	}
	if !IsFake(dev) {
		t.Fatal("IsFake is false on the fake driver")
	}
}
