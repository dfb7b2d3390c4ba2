package pinned

import (
	"errors"
	"math"
	"testing"
)

// TestQuotaAbsurdSize: an Alloc of an absurd size (math.MaxInt) under a quota some buffers
// use took the pool's count of live bytes past math.MaxInt64, where it wrapped to a negative
// sum that the quota let through: until the allocation failed and took its bytes back, an
// Alloc of another goroutine found room in a full quota, and got its buffer beyond it. A size
// above the quota, or the capacity, is now refused before it is counted.
func TestQuotaAbsurdSize(t *testing.T) {
	const quota = 1 << 20
	p, err := New(Options{Backend: Pageable, Capacity: 16 << 20, Quota: quota})
	if err != nil {
		t.Fatal(err)
	}
	full, err := p.Alloc(quota)
	if err != nil {
		t.Fatal(err)
	}
	var inner []byte
	var innerErr error
	ran := false
	afterQuotaRoom = func() { // another goroutine's Alloc, while the absurd one is counted
		afterQuotaRoom = nil
		ran = true
		inner, innerErr = p.Alloc(4096)
	}
	_, err = p.Alloc(math.MaxInt)
	afterQuotaRoom = nil
	if !errors.Is(err, ErrQuota) && !errors.Is(err, ErrTooLarge) {
		t.Errorf("Alloc(MaxInt) under a quota: %v, want ErrQuota or ErrTooLarge", err)
	}
	if ran && innerErr == nil {
		t.Errorf("an Alloc of 4096 bytes under a full quota of %d, while an Alloc(MaxInt) was counted, got its buffer", quota)
		if err := p.Free(inner); err != nil {
			t.Error(err)
		}
	}
	if used := p.used.Load(); used != quota {
		t.Errorf("%d bytes counted in use, want %d", used, quota)
	}
	if err := p.Free(full); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
