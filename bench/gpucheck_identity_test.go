//go:build cgo && linux

package main

// What the check takes for a GPU: a driver is the fake by what it exports, whichever source it
// was built from, and a driver that is not the fake must have an NVIDIA device to reach.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// otherFake compiles pinmalloc's fake driver from a source other than this program's, as
// edit changes it, into dir: a fake an older commit built, or one copied and changed.
func otherFake(t *testing.T, dir string, edit func(string) string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no C compiler to build a fake driver of another source:", err)
	}
	src, lib := filepath.Join(dir, "other.c"), filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(src, []byte(edit(fakecuda.Source)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return lib
}

// withoutMarker is the fake's source before it had a marker symbol (an older commit's).
func withoutMarker(src string) string {
	return regexp.MustCompile(`(?m)^const char pinmalloc_fake_driver\[\].*$`).ReplaceAllString(src, "")
}

// TestGpucheckFakeOfOtherSource: the fake built from an older source, which lacks the marker
// symbol, named "NVIDIA H200", is still known as the fake (by the controls every pinmalloc fake
// exports): the report says so and grades nothing.
func TestGpucheckFakeOfOtherSource(t *testing.T) {
	needFake(t)
	lib := otherFake(t, t.TempDir(), withoutMarker)
	out := t.TempDir()
	code, log := runMain(t, []string{cuda.LibraryEnv + "=" + lib, fakecuda.NameEnv + "=NVIDIA H200"}, "-gpucheck", out, "-bin", standInBin(t),
		"-quick", "-cases", "^uvm-acquire/resident$", "-deadline", "2m")
	doc := readReport(t, out, "fake-driver-quick")
	if code != 0 || !doc.Device.Fake || doc.Note != fakeNote {
		t.Errorf("exit %d, device %+v, note %q: an older fake named as a GPU must be reported as the fake\n%s", code, doc.Device, doc.Note, log)
	}
	for _, ct := range doc.Checks {
		if ct.Kind == "target" && ct.Status != na {
			t.Errorf("%s graded %s on an older fake named NVIDIA H200", ct.Name, ct.Status)
		}
	}
}

// TestGpucheckDriverWithoutGPU: a driver that is not pinmalloc's fake by any symbol (a fake of
// some other source, named "NVIDIA H200") on a machine with no NVIDIA device node cannot be a
// GPU's: the check fails at the device step, saying so, and grades nothing.
func TestGpucheckDriverWithoutGPU(t *testing.T) {
	needFake(t)
	if nodes := nvidiaDeviceNodes("/dev"); len(nodes) > 0 {
		t.Skipf("this machine has NVIDIA device nodes (%v): a driver without a GPU cannot be staged here", nodes)
	}
	lib := otherFake(t, t.TempDir(), func(src string) string {
		return strings.ReplaceAll(withoutMarker(src), "fake_ctl(", "other_ctl(")
	})
	out := t.TempDir()
	code, log := runMain(t, []string{cuda.LibraryEnv + "=" + lib, fakecuda.NameEnv + "=NVIDIA H200"}, "-gpucheck", out, "-bin", standInBin(t),
		"-quick", "-cases", "^uvm-acquire/resident$", "-deadline", "2m")
	doc := readReport(t, out, "gpucheck")
	if code != 1 || doc.Status != fail || len(doc.Steps) != 4 || doc.Steps[0].Status != fail || !strings.Contains(doc.Steps[0].Detail, "no NVIDIA device") {
		t.Errorf("exit %d, steps %+v: want the device step to fail, saying no NVIDIA device is here\n%s", code, doc.Steps, log)
	}
	for _, ct := range doc.Checks {
		if ct.Kind == "target" && (ct.Status == pass || ct.Value != 0) {
			t.Errorf("%s graded %s (%g) on a driver with no GPU", ct.Name, ct.Status, ct.Value)
		}
	}
}

// TestNvidiaDeviceNodes: only character devices named as NVIDIA's (nvidiactl, nvidia0, ...,
// WSL's dxg) count; a file of such a name is none.
func TestNvidiaDeviceNodes(t *testing.T) {
	dev := t.TempDir()
	for _, name := range []string{"nvidia0", "nvidiactl", "dxg"} {
		if err := os.WriteFile(filepath.Join(dev, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if nodes := nvidiaDeviceNodes(dev); len(nodes) != 0 {
		t.Errorf("plain files taken for device nodes: %v", nodes)
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		// /dev holds character devices; none of them is NVIDIA's unless this machine has a GPU.
		for _, n := range nvidiaDeviceNodes("/dev") {
			if !strings.Contains(n, "nvidia") && !strings.HasSuffix(n, "dxg") {
				t.Errorf("%s taken for an NVIDIA device node", n)
			}
		}
	}
}
