package ipcpool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// Serve that the system refuses the path (its folder missing: the lock file cannot be made; a
// file that is no socket at the path: the socket cannot be bound; the socket gone before it is
// opened to its mode) fails with ErrRefused, the system's error kept as the cause, and says
// "ipcpool" once. (Each wrapped the system's error in words of its own and matched no
// sentinel of the package.)
func TestServeRefusedThePathIsErrRefused(t *testing.T) {
	dir := t.TempDir()
	notSocket := filepath.Join(dir, "file.sock")
	must(t, "a file at the path", os.WriteFile(notSocket, nil, 0o600))
	cases := []struct {
		what, path string
		cause      error
		listened   func(path string)
	}{
		{"a path in a folder that does not exist", filepath.Join(dir, "none", "pool.sock"), syscall.ENOENT, nil},
		{"a path a file that is no socket holds", notSocket, syscall.EADDRINUSE, nil},
		{"a socket removed before it is opened to its mode", filepath.Join(dir, "gone.sock"), syscall.ENOENT,
			func(path string) { _ = os.Remove(path) }},
	}
	t.Cleanup(func() { listened = nil })
	for _, c := range cases {
		listened = c.listened
		w, err := Serve(c.path, Options{Size: 4 << 20, FallbackPageable: true})
		if err == nil {
			_ = w.Close()
			t.Fatalf("Serve on %s served", c.what)
		}
		if !errors.Is(err, ErrRefused) || !errors.Is(err, pinmalloc.ErrRefused) || !errors.Is(err, c.cause) ||
			strings.Count(err.Error(), "ipcpool") != 1 {
			t.Errorf("Serve on %s: %q; want ErrRefused, the cause %v kept, \"ipcpool\" said once", c.what, err, c.cause)
		}
	}
}
