package align

import (
	"errors"
	"math/big"
	"testing"
)

func TestUpDown(t *testing.T) {
	cases := []struct{ x, a, up, down uintptr }{
		{0, 1, 0, 0}, {1, 1, 1, 1}, {1, 64, 64, 0}, {64, 64, 64, 64}, {65, 64, 128, 64},
		{4095, 4096, 4096, 0}, {1 << 21, 1 << 21, 1 << 21, 1 << 21},
	}
	for _, c := range cases {
		if got, err := Up(c.x, c.a); err != nil || got != c.up {
			t.Errorf("Up(%d,%d) = %d,%v want %d", c.x, c.a, got, err, c.up)
		}
		if got, err := Down(c.x, c.a); err != nil || got != c.down {
			t.Errorf("Down(%d,%d) = %d,%v want %d", c.x, c.a, got, err, c.down)
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
		if _, err := Down(1, a); !errors.Is(err, ErrNotPow2) {
			t.Errorf("Down(1,%d): %v", a, err)
		}
		if Is(0, a) {
			t.Errorf("Is(0,%d) true", a)
		}
	}
	if _, err := UpPow2(^uintptr(0)); !errors.Is(err, ErrOverflow) {
		t.Errorf("UpPow2 overflow: %v", err)
	}
	if _, err := Add(^uintptr(0), 1); !errors.Is(err, ErrOverflow) {
		t.Errorf("Add overflow: %v", err)
	}
	if _, err := Mul(1<<40, 1<<40); !errors.Is(err, ErrOverflow) {
		t.Errorf("Mul overflow: %v", err)
	}
	if _, err := Log2(12); !errors.Is(err, ErrNotPow2) {
		t.Errorf("Log2(12): %v", err)
	}
}

func TestSmall(t *testing.T) {
	for x := uintptr(0); x < 70; x++ {
		p, _ := UpPow2(x)
		if !IsPow2(p) || p < x || (p > 1 && p/2 >= x) {
			t.Fatalf("UpPow2(%d) = %d", x, p)
		}
	}
	if l, _ := Log2(1 << 21); l != 21 {
		t.Fatalf("Log2 = %d", l)
	}
	if LowBit(0x6000) != 0x2000 || LowBit(0) != 0 {
		t.Fatal("LowBit")
	}
}

// FuzzUp checks Up, Down, Add and Mul against arbitrary-precision arithmetic.
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
		d, _ := Down(uintptr(x), a)
		if d > uintptr(x) || uintptr(x)-d >= a || !Is(d, a) {
			t.Fatalf("Down(%d,%d) = %d", x, a, d)
		}
		sum := new(big.Int).Add(bx, new(big.Int).SetUint64(y))
		if s, err := Add(uintptr(x), uintptr(y)); (sum.Cmp(max) > 0) != (err != nil) || (err == nil && uint64(s) != sum.Uint64()) {
			t.Fatalf("Add(%d,%d) = %d,%v", x, y, s, err)
		}
		prod := new(big.Int).Mul(bx, new(big.Int).SetUint64(y))
		if m, err := Mul(uintptr(x), uintptr(y)); (prod.Cmp(max) > 0) != (err != nil) || (err == nil && uint64(m) != prod.Uint64()) {
			t.Fatalf("Mul(%d,%d) = %d,%v", x, y, m, err)
		}
	})
}
