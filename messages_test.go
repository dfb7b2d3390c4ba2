package pinmalloc_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestNoDriverSaidOnce: no message of the module puts "no CUDA driver" before an error, which
// (cuda.ErrNoDriver) says it already.
func TestNoDriverSaidOnce(t *testing.T) {
	said := regexp.MustCompile(`"[^"\n]*no CUDA driver[^"\n]*%[vw]`)
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == "vendor" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || path == "messages_test.go" {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		for i, l := range strings.Split(string(b), "\n") {
			if said.MatchString(l) {
				t.Errorf("%s:%d: %s\n\tthe error printed says \"no CUDA driver\" itself: say it once", path, i+1, strings.TrimSpace(l))
			}
		}
		return err
	})
	if err != nil || files < 100 {
		t.Fatalf("read %d files: %v", files, err)
	}
}

// TestMessages checks the text of the errors a user meets first: each says its package and
// what failed once, with the particulars after, and says "1 buffer", not "1 buffers".
func TestMessages(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	got := map[string]error{"double free": p.Free(b), "Go memory": p.Free(make([]byte, 10))}
	c, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	got["sub-slice"] = p.Free(c[1:])
	got["Close with a buffer live"] = p.Close()
	for what, want := range map[string]string{
		"double free":              `^pinned: double free: 0x[0-9a-f]+$`,
		"Go memory":                `^pinned: buffer not owned by this pool: 0x[0-9a-f]+ is outside the arena$`,
		"sub-slice":                `^pinned: not a whole buffer \(sub-slice\): 0x[0-9a-f]+ is 1 byte into a block$`,
		"Close with a buffer live": `^pinned: buffers still live: 1 buffer \(100 bytes\); `,
	} {
		if err := got[what]; err == nil || !regexp.MustCompile(want).MatchString(err.Error()) {
			t.Errorf("%s: %v\nwant it to match %s", what, err, want)
		}
	}
	_ = p.Free(c)

	// Without a driver, the library is named once.
	dev, err := cuda.Open(0)
	if err == nil {
		dev.Close()
		t.Log("a driver is installed: the no-driver messages are not checked")
		return
	}
	_, perr := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20})
	for what, err := range map[string]error{"cuda.Open": err, "pinned.New(CUDAHost)": perr} {
		if !errors.Is(err, cuda.ErrNoDriver) {
			continue // a driver that loads without a device, say
		}
		msg := err.Error()
		for _, once := range []string{"libcuda.so.1", "no CUDA driver"} {
			if n := strings.Count(msg, once); n > 1 {
				t.Errorf("%s: %q says %q %d times", what, msg, once, n)
			}
		}
	}
}
