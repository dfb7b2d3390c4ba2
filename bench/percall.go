package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// percallMlock pins each buffer on its own: mmap + mlock to allocate, munlock + munmap to
// free. It is what a program does without a pool, and what cudaHostAlloc resembles.
type percallMlock struct{}

func newPercallMlock() impl {
	im := goImpl("percall-mlock", func(int64) (allocator[[]byte], error) { return percallMlock{}, nil })
	im.trace, im.huge = nil, nil // it holds exactly what is live, rounded to pages
	im.churn = nil               // the churn cases compare pinmalloc with the C allocators
	return selfLocking(im)
}

func (percallMlock) alloc(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("mmap %d: %w", n, err)
	}
	if err := unix.Mlock(b); err != nil {
		return nil, errors.Join(fmt.Errorf("mlock %d: %w", n, err), unix.Munmap(b))
	}
	return b, nil
}

func (percallMlock) free(b []byte) error { return errors.Join(unix.Munlock(b), unix.Munmap(b)) }
func (percallMlock) touch(b []byte)      { b[0] = 1 }
func (percallMlock) close() error        { return nil }
