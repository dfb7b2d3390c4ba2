package ucx

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// ownAddress returns the address of a worker made under env (UCX reads it when the context is
// made); the environment is as it was after.
func ownAddress(tb testing.TB, env map[string]string) []byte {
	tb.Helper()
	for k, v := range env {
		old, had := os.LookupEnv(k)
		_ = os.Setenv(k, v)
		defer func() {
			if had {
				_ = os.Setenv(k, old)
			} else {
				_ = os.Unsetenv(k)
			}
		}()
	}
	c, err := NewContext("address-test")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWorker(8, 1<<16)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Destroy()
	a, err := w.Address()
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// addressConfigs are UCX configurations whose workers' addresses CheckAddress must accept:
// both address versions, the debug information (the worker's name), TCP and shared memory.
var addressConfigs = []map[string]string{
	{},
	{"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"},
	{"UCX_TLS": "sm"},
	{"UCX_ADDRESS_VERSION": "v2"},
	{"UCX_ADDRESS_VERSION": "v2", "UCX_TLS": "sm"},
	{"UCX_ADDRESS_DEBUG_INFO": "y"},
	{"UCX_ADDRESS_DEBUG_INFO": "y", "UCX_ADDRESS_VERSION": "v2"},
}

// TestCheckAddress: every address UCX 1.13 gives a worker is accepted; every proper prefix of
// one (a truncated address, which ucp_ep_create reads past its end), one with a byte after it,
// and one naming an address version other than 1 or 2 (on which UCX aborts the process) are
// refused with UCS_ERR_INVALID_ADDR (pinmalloc.ErrInvalid).
func TestCheckAddress(t *testing.T) {
	needUCX(t)
	for _, env := range addressConfigs {
		a := ownAddress(t, env)
		if err := CheckAddress(a); err != nil {
			t.Fatalf("the address of a worker under %v (%d bytes, % x): %v", env, len(a), a, err)
		}
		for n := range len(a) {
			if err := CheckAddress(a[:n]); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("under %v, the first %d bytes of an address of %d: %v, want ErrInvalid", env, n, len(a), err)
			}
		}
		if err := CheckAddress(append(bytes.Clone(a), 0)); !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Fatalf("under %v, an address with a byte after its end: %v, want ErrInvalid", env, err)
		}
		for v := byte(2); v < 16; v++ {
			b := bytes.Clone(a)
			b[0] = b[0]&0xf0 | v
			if err := CheckAddress(b); !errors.Is(err, pinmalloc.ErrInvalid) {
				t.Fatalf("under %v, an address of version %d: %v, want ErrInvalid", env, v+1, err)
			}
		}
		t.Logf("%v: %d bytes", env, len(a))
	}
}

// FuzzCheckAddress: CheckAddress never panics, accepts nothing beyond MaxAddressLen, and the
// grammar it checks delimits itself: no proper prefix of an address it accepts is accepted.
func FuzzCheckAddress(f *testing.F) {
	if Load() == nil {
		for _, env := range addressConfigs {
			f.Add(ownAddress(f, env))
		}
	}
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0xff})
	f.Add([]byte{0x20, 1, 2, 3, 4, 5, 6, 7, 8, 0xff})
	f.Fuzz(func(t *testing.T, a []byte) {
		if CheckAddress(a) != nil {
			return
		}
		if len(a) > MaxAddressLen {
			t.Fatalf("accepted %d bytes", len(a))
		}
		for n := range len(a) {
			if CheckAddress(a[:n]) == nil {
				t.Fatalf("accepted % x and its first %d bytes", a, n)
			}
		}
	})
}
