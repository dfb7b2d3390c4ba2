package heap

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSizeClassesGenerated checks that sizeclasses.go is what mksizeclasses.go generates now.
func TestSizeClassesGenerated(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to run the generator with: %v", err)
	}
	out := filepath.Join(t.TempDir(), "sizeclasses.go")
	if b, err := exec.Command(gotool, "run", "mksizeclasses.go", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("go run mksizeclasses.go: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("sizeclasses.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatal("sizeclasses.go is stale: run go generate ./heap")
	}
}

// TestClassFacts checks the generated facts against the heap's geometry: a page's slices make
// its page size, its blocks fill it, and every class of a kind has the same page size, which
// tiles a segment.
func TestClassFacts(t *testing.T) {
	var kindPage [numSegKinds]uint32
	for c := 0; c < numClasses; c++ {
		size, pg, kind, slices := classSize[c], classPage[c], classKind[c], uint32(classSlices[c])
		if slices<<sliceShift != pg {
			t.Errorf("class %d: %d slices for a %d B page", c, slices, pg)
		}
		if uint32(classBlocks[c]) != pg/size {
			t.Errorf("class %d: %d blocks of %d B in a %d B page", c, classBlocks[c], size, pg)
		}
		if kind != segSmall && kind != segMedium && kind != segLarge {
			t.Errorf("class %d: kind %d", c, kind)
		}
		if kindPage[kind] == 0 {
			kindPage[kind] = pg
		}
		if kindPage[kind] != pg || segSize%pg != 0 {
			t.Errorf("class %d: %d B pages of kind %d (others of the kind: %d B; a segment: %d B)", c, pg, kind, kindPage[kind], segSize)
		}
	}
}
