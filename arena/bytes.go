package arena

// The []byte view of an arena's memory, for callers outside the module: the arena and the heap
// hand out addresses (uintptr), and turning one into a slice needs unsafe, which go vet rightly
// questions. Bytes does the conversion once, after checking that the CPU may touch the range
// now: the memory is host-accessible (not device memory), the range lies inside one region,
// inside chunks handed out, and every granule it touches is committed (mapped readable and
// writable). The view stays valid until the memory is given back (Free of its span, a heap
// Free of its block, a Decommit) or the arena closed; using it after that is the caller's bug,
// as with any freed memory.

import "fmt"

// Bytes returns [addr, addr+n) as a []byte with len and cap n, after checking it: an arena of
// device memory gives an error wrapping ErrNotHostAccessible; a range that is empty, not inside
// a region of this arena, past its region's end, in chunks not handed out, or in memory not
// committed, an error wrapping ErrInvalid; a closed arena, ErrClosed. It takes the arena's lock,
// so it suits a buffer's setup, not a hot loop.
func (a *Arena) Bytes(addr, n uintptr) ([]byte, error) {
	if k := a.prov.Kind(); !k.HostAccessible() {
		return nil, fmt.Errorf("%w: [%#x, +%d) is %s memory", ErrNotHostAccessible, addr, n, k)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: an empty range at %#x", ErrInvalid, addr)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	r := a.regionAt(addr)
	if r == nil {
		return nil, fmt.Errorf("%w: %#x is not in a region of this arena", ErrInvalid, addr)
	}
	if n > r.end-addr {
		return nil, fmt.Errorf("%w: [%#x, +%d) runs %d bytes past the end of its region [%#x, %#x)",
			ErrInvalid, addr, n, n-(r.end-addr), r.r.Base, r.end)
	}
	first, last := int((addr-r.grid)>>a.shift), int((addr+n-1-r.grid)>>a.shift)
	if r.used.Count(first, last+1) != last-first+1 {
		return nil, fmt.Errorf("%w: [%#x, +%d) reaches into chunks not handed out", ErrInvalid, addr, n)
	}
	glo, ghi := r.granules(addr, n)
	if r.commit.Count(glo, ghi) != ghi-glo {
		return nil, fmt.Errorf("%w: [%#x, +%d) reaches into memory not committed", ErrInvalid, addr, n)
	}
	return bytesAt(addr, n), nil
}
