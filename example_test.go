package pinmalloc_test

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// One test of a kind covers every package's sentinel of that kind: a double free in a pool is
// pinned.ErrDoubleFree and pinmalloc.ErrDoubleFree, and so is one in a device heap or a shared
// pool.
func Example() {
	pool, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, err := pool.Alloc(4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = pool.Free(buf)
	err = pool.Free(buf)
	fmt.Println(errors.Is(err, pinned.ErrDoubleFree), errors.Is(err, pinmalloc.ErrDoubleFree))
	_, err = pool.Alloc(-1)
	fmt.Println(errors.Is(err, pinmalloc.ErrInvalidSize))
	// Output:
	// true true
	// true
}
