package arena_test

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
)

// An arena of pageable host memory: a run of chunks, committed and viewed as bytes, then given
// back. The heap above it (package heap) carves such runs into blocks.
func Example() {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 8 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	s, err := a.Alloc(1<<20, 4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := a.Bytes(s.Base, s.Size)
	if err != nil {
		fmt.Println(err)
		return
	}
	b[0] = 1
	fmt.Println(len(b), s.Base%4096 == 0, s.Zeroed)
	fmt.Println(a.Free(s))
	// Output:
	// 1048576 true true
	// <nil>
}

// Exhausted tells an arena that ran out of room, which giving memory back may cure, from one
// that refused a request for another reason, which trying again will not.
func ExampleExhausted() {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 4 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	_, full := a.Alloc(64<<20, 4096) // more than the capacity
	_, invalid := a.Alloc(1<<20, 3)  // not a power of two
	fmt.Println(arena.Exhausted(full), arena.Exhausted(invalid))
	// Output: true false
}
