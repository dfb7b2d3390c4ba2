//go:build cgo && linux

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestInitWithoutCuInit: a library that loads but has no cuInit (libc stands in for it) is no
// CUDA driver: its initialization matches ErrNoDriver, which a caller asking whether there is a
// driver tests, and ErrSymbol, naming cuInit; it said ErrSymbol alone. The message says "cuda:"
// once and names cuInit and the library.
func TestInitWithoutCuInit(t *testing.T) {
	dr, err := loadFrom("libc.so.6")
	if err != nil {
		t.Skipf("cannot load libc.so.6 to stand in for a library without cuInit: %v", err)
	}
	defer dr.close()
	err = initOn(dr)
	if !errors.Is(err, pinmalloc.ErrNoDriver) || !errors.Is(err, pinmalloc.ErrSymbol) {
		t.Fatalf("initOn(libc) = %v, want an error matching ErrNoDriver and ErrSymbol", err)
	}
	msg := err.Error()
	if strings.Count(msg, "cuda:") != 1 || !strings.Contains(msg, "cuInit") ||
		!strings.Contains(msg, "libc.so.6") {
		t.Errorf("initOn(libc) = %q; want \"cuda:\" once, cuInit and libc.so.6 named", msg)
	}
}

// TestInitFailure: cuInit's failure keeps its Result in the chain, and its class (no device),
// and says "cuda:" once.
func TestInitFailure(t *testing.T) {
	with, _ := buildFake(t)
	dr, err := loadFrom(with)
	must(t, "loadFrom", err)
	defer dr.close()
	must(t, "initOn", initOn(dr))
	err = initError(dr, Result(resultNoDevice))
	var r Result
	if !errors.Is(err, pinmalloc.ErrNoDevice) || errors.Is(err, pinmalloc.ErrNoDriver) ||
		!errors.As(err, &r) || r != resultNoDevice {
		t.Errorf("cuInit's CUDA_ERROR_NO_DEVICE = %v, want ErrNoDevice and Result 100", err)
	}
	if msg := err.Error(); strings.Count(msg, "cuda:") != 1 || !strings.HasPrefix(msg, "cuda: ") ||
		!strings.Contains(msg, "cuInit") {
		t.Errorf("cuInit's failure says %q; want \"cuda:\" once, at its start, and cuInit", msg)
	}
}
