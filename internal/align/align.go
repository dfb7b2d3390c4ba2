// Package align is overflow-checked power-of-two arithmetic on addresses and sizes.
//
// Every function that can overflow returns an error instead of a wrapped value: a size near the
// top of the address space must never round up to a small one.
package align

import (
	"errors"
	"math/bits"
)

var (
	// ErrNotPow2 means an alignment is zero or not a power of two.
	ErrNotPow2 = errors.New("align: alignment is not a power of two")
	// ErrOverflow means the result does not fit in a uintptr.
	ErrOverflow = errors.New("align: overflow")
)

// IsPow2 reports whether x is a power of two (zero is not).
func IsPow2(x uintptr) bool { return x != 0 && x&(x-1) == 0 }

// Up rounds x up to a multiple of a, which must be a power of two.
func Up(x, a uintptr) (uintptr, error) {
	if !IsPow2(a) {
		return 0, ErrNotPow2
	}
	r, carry := bits.Add64(uint64(x), uint64(a-1), 0)
	if carry != 0 || r > uint64(^uintptr(0)) {
		return 0, ErrOverflow
	}
	return uintptr(r) &^ (a - 1), nil
}

// Log2 returns log2(a) for a power of two a.
func Log2(a uintptr) (uint, error) {
	if !IsPow2(a) {
		return 0, ErrNotPow2
	}
	return uint(bits.TrailingZeros64(uint64(a))), nil
}

// Add returns x+y or ErrOverflow.
func Add(x, y uintptr) (uintptr, error) {
	r, carry := bits.Add64(uint64(x), uint64(y), 0)
	if carry != 0 || r > uint64(^uintptr(0)) {
		return 0, ErrOverflow
	}
	return uintptr(r), nil
}
