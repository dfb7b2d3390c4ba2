package align

import (
	"errors"
	"math/big"
	"testing"
)

func TestUp(t *testing.T) {
	cases := []struct{ x, a, up uintptr }{
		{0, 1, 0}, {1, 1, 1}, {1, 64, 64}, {64, 64, 64}, {65, 64, 128},
		{4095, 4096, 4096}, {1 << 21, 1 << 21, 1 << 21},
	}
	for _, c := range cases {
		if got, err := Up(c.x, c.a); err != nil || got != c.up {
			t.Errorf("Up(%d,%d) = %d,%v want %d", c.x, c.a, got, err, c.up)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := Up(^uintptr(0), 2); !errors.Is(err, ErrOverflow) {
		t.Errorf("Up overflow: %v", err)
	}
	for _, a := range []uintptr{0, 3, 6, 100} {
		if _, err := Up(1, a); !errors.Is(err, ErrNotPow2) {
			t.Errorf("Up(1,%d): %v", a, err)
		}
		if IsPow2(a) {
			t.Errorf("IsPow2(%d) true", a)
		}
	}
	if _, err := Add(^uintptr(0), 1); !errors.Is(err, ErrOverflow) {
		t.Errorf("Add overflow: %v", err)
	}
	if _, err := Log2(12); !errors.Is(err, ErrNotPow2) {
		t.Errorf("Log2(12): %v", err)
	}
}

func TestLog2(t *testing.T) {
	if l, _ := Log2(1 << 21); l != 21 {
		t.Fatalf("Log2 = %d", l)
	}
}

// FuzzUp checks Up and Add against arbitrary-precision arithmetic.
func FuzzUp(f *testing.F) {
	f.Add(uint64(1), uint8(6), uint64(3))
	f.Add(^uint64(0), uint8(1), ^uint64(0))
	f.Add(uint64(1<<63), uint8(63), uint64(2))
	f.Fuzz(func(t *testing.T, x uint64, shift uint8, y uint64) {
		a := uintptr(1) << (shift % 64)
		max := new(big.Int).SetUint64(uint64(^uintptr(0)))
		bx, ba := new(big.Int).SetUint64(uint64(x)), new(big.Int).SetUint64(uint64(a))
		want := new(big.Int).Add(bx, new(big.Int).Sub(ba, big.NewInt(1)))
		want.Div(want, ba).Mul(want, ba)
		got, err := Up(uintptr(x), a)
		if want.Cmp(max) > 0 {
			if !errors.Is(err, ErrOverflow) {
				t.Fatalf("Up(%d,%d) = %d, want overflow", x, a, got)
			}
		} else if err != nil || uint64(got) != want.Uint64() {
			t.Fatalf("Up(%d,%d) = %d,%v want %s", x, a, got, err, want)
		}
		sum := new(big.Int).Add(bx, new(big.Int).SetUint64(y))
		if s, err := Add(uintptr(x), uintptr(y)); (sum.Cmp(max) > 0) != (err != nil) || (err == nil && uint64(s) != sum.Uint64()) {
			t.Fatalf("Add(%d,%d) = %d,%v", x, y, s, err)
		}
	})
}
