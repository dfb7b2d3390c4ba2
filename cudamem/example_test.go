package cudamem_test

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
)

// Example makes an arena of pinned host memory on device 0 and takes a buffer of it: a []byte
// the driver copies by DMA. It needs a GPU, so it has no output to check; TestPackageUse runs
// the same on the fake driver.
func Example() {
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU:", err) // errors.Is(err, cuda.ErrNoDriver) on a machine without one
		return
	}
	defer dev.Close() // after the arena's Close: deferred calls run last first

	prov, err := cudamem.NewHost(dev, cudamem.HostOptions{}) // VMM host granules, else registered mmap
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := arena.New(arena.Options{Provider: prov, Capacity: 1 << 30})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	sp, err := a.Alloc(4<<20, 64) // 4 MiB, committed and pinned
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := a.Bytes(sp.Base, sp.Size)
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(b, "staged for the GPU")
	fmt.Printf("%d bytes of pinned memory from %s\n", len(b), prov.Name())
	if err := a.Free(sp); err != nil {
		fmt.Println(err)
	}
}
