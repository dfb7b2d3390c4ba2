package cuda_test

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeExamplesRun runs the examples that need a GPU (they have no output to check, so go
// test only compiles them) on the fake driver, and checks that they print what a GPU makes
// them print: the device's line for Example, nothing for Example_interop (each prints an
// error only), and leave nothing behind.
func TestFakeExamplesRun(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	for _, c := range []struct {
		name string
		run  func()
		want func(string) bool
	}{
		{"Example", Example, func(s string) bool {
			return strings.HasPrefix(s, "Fake GPU 0: ") && strings.HasSuffix(s, " MiB free\n") &&
				strings.Count(s, "\n") == 1
		}},
		{"Example_interop", Example_interop, func(s string) bool { return s == "" }},
	} {
		if out := stdout(t, c.run); !c.want(out) {
			t.Errorf("%s printed %q", c.name, out)
		}
		if live := f.LiveObjects(); len(live) != 0 {
			t.Errorf("%s left %v live in the driver", c.name, live)
		}
	}
}

// stdout returns what f writes to os.Stdout.
func stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	must(t, "Pipe", err)
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	func() {
		defer func() { os.Stdout = saved }()
		f()
	}()
	must(t, "Close", w.Close())
	return <-done
}
