package fence

import (
	"sync/atomic"
	"testing"
)

// section has a fast section's shape: a flag raised, another loaded, a word written, the flag
// released.
type section struct {
	inside  uint32
	_       [60]byte
	revoked atomic.Uint32
	words   [4]uint64
}

//go:noinline
func releaseSection(s *section, i uint64) {
	s.inside = 1
	if s.revoked.Load() == 0 {
		s.words[i&3] += i
	}
	Release(&s.inside, 0)
}

//go:noinline
func atomicStoreSection(s *section, i uint64) {
	s.inside = 1
	if s.revoked.Load() == 0 {
		s.words[i&3] += i
	}
	atomic.StoreUint32(&s.inside, 0)
}

// BenchmarkSectionRelease is a fast section that ends with Release, against
// BenchmarkSectionAtomicStore, one that ends with an atomic store: what Release's choice of
// store saves every fast section (release_amd64.go).
func BenchmarkSectionRelease(b *testing.B) {
	var s section
	for i := uint64(0); b.Loop(); i++ {
		releaseSection(&s, i)
	}
}

// BenchmarkSectionAtomicStore is BenchmarkSectionRelease's section ending with an atomic store.
func BenchmarkSectionAtomicStore(b *testing.B) {
	var s section
	for i := uint64(0); b.Loop(); i++ {
		atomicStoreSection(&s, i)
	}
}
