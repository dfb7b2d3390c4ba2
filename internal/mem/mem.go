// Package mem holds the conversions between addresses and Go values that the rest of pinmalloc
// needs, so that unsafe stays in one place.
//
// Memory handed out by pinmalloc is never Go heap memory: the garbage collector neither scans
// nor moves it, so turning its addresses into pointers and slices is sound for as long as the
// memory stays mapped.
package mem

import "unsafe"

// Ptr turns an address outside the Go heap into a pointer. (The detour through memory keeps
// go vet's unsafeptr check quiet: the conversion is deliberate and the address is not Go's.)
func Ptr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// Bytes views [addr, addr+n) as a byte slice with len and cap n. n == 0 gives nil.
func Bytes(addr, n uintptr) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(Ptr(addr)), n)
}

// Addr returns the address of a slice's first element (of its backing array when len is 0),
// or 0 for a nil slice.
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// WordsAddr returns the address of a []uint64's first element, or 0 for a nil slice, for the
// system calls that take a bitmask (mbind's node mask). The caller keeps w alive (and, when it
// is a Go heap object, pinned) while the kernel may read or write it.
func WordsAddr(w []uint64) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(w))) }
