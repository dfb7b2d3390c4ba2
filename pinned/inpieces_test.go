package pinned

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// tryAllocIn allocates n bytes as the holder of home shard i (made if need be), as a goroutine
// on P i does on its blocking path (Pool.allocRest: once more after every shard gave back
// what it keeps).
func tryAllocIn(p *Pool, i int, n uintptr) ([]byte, error) {
	var addr uintptr
	var err error
	for try := 0; try < 2; try++ {
		if try > 0 {
			p.collectAll()
		}
		s := p.home[i].Load()
		if s == nil {
			if s, err = p.newShard(i); s == nil {
				return nil, fmt.Errorf("shard %d not made: %v", i, err)
			}
		} else {
			p.hold([]*shard{s})
		}
		addr, err = s.h.Alloc(n)
		letGo(s)
		if err == nil {
			return mem.Bytes(addr, n), nil
		}
		if !outOfMemory(err) {
			break
		}
	}
	return nil, err
}

// allocIn is tryAllocIn that fails the test on an error.
func allocIn(t *testing.T, p *Pool, i int, n uintptr) []byte {
	t.Helper()
	b, err := tryAllocIn(p, i, n)
	if err != nil {
		t.Fatalf("Alloc(%d) in shard %d: %v", n, i, err)
	}
	return b
}

// takeOtherShards runs an 8 MiB pool of four home shards (one P, so that the pool's own
// Allocs land in home shard 0) where every shard has made and freed a buffer of each size, its
// freed memory kept in segments and object pages of its own, and all of the capacity reserved
// so, one buffer of them live at most: an Alloc of 3, 4 or 6 MiB that the live buffer leaves
// room for must succeed, the other shards giving back what they keep (Pool.allocRest).
func takeOtherShards(t *testing.T, o Options) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o.Capacity, o.Shards, o.PurgeDelay = 8<<20, 4, -1
	for _, sz := range []uintptr{100, 8 << 10, 64 << 10, 1 << 20, 3 << 19} {
		for keep := 0; keep <= 1; keep++ {
			p := newTestPool(t, o)
			if big, err := p.Alloc(1 << 20); err != nil { // the big shard, where there is one
				t.Fatal(err)
			} else if err := p.Free(big); err != nil {
				t.Fatal(err)
			}
			var live []byte
			for i := range 4 {
				b := allocIn(t, p, i, sz)
				if i < keep {
					live = b
				} else if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			if b, err := p.Alloc(int(sz)); err != nil { // the pool's own paths too
				t.Fatal(err)
			} else if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{3 << 20, 4 << 20, 6 << 20} {
				if keep > 0 && n > 4<<20 {
					continue // a chunk for the live buffer, one more at most for alignment
				}
				b, err := p.Alloc(n)
				if err != nil {
					t.Errorf("buffers of %d bytes, %d live: Alloc(%d): %v", sz, len(live), n, err)
					continue
				}
				if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			if live != nil {
				if err := p.Free(live); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAllocTakesOtherShardsMemory: takeOtherShards on pageable memory, one chunk per segment.
func TestAllocTakesOtherShardsMemory(t *testing.T) {
	takeOtherShards(t, Options{Backend: Pageable})
}

// TestFakeAllocTakesOtherShardsMemoryRegister: takeOtherShards on CUDAHost's registered memory
// (a driver without VMM host memory), which commits 2 MiB at a time: a big shard, and class
// pages lent to its runs.
func TestFakeAllocTakesOtherShardsMemoryRegister(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	takeOtherShards(t, Options{Backend: CUDAHost})
}

// TestFakeAllocTakesOtherShardsMemoryVMM: takeOtherShards on CUDAHost's VMM host memory.
func TestFakeAllocTakesOtherShardsMemoryVMM(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	takeOtherShards(t, Options{Backend: CUDAHost})
}

// TestFakeRegisterRefusalsKeepNoCapacity: in an 8 MiB pool of four shards on registered memory,
// where the driver refuses one cuMemHostRegister or cuMemHostUnregister (each in turn), Allocs
// and Frees in every shard, then Trims, leave no capacity behind: with nothing live, an Alloc
// of 3 or 6 MiB succeeds.
func TestFakeRegisterRefusalsKeepNoCapacity(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	refused := 0
	for _, call := range []fakecuda.PinCall{fakecuda.CallRegister, fakecuda.CallUnregister} {
		for skip := 0; skip < 12; skip++ {
			p := newTestPool(t, Options{Backend: CUDAHost, Capacity: 8 << 20, Shards: 4, PurgeDelay: -1})
			f.FailAfter(call, skip, fakecuda.ResultOutOfMemory)
			var live [][]byte
			for round := range 3 {
				for i := range 4 {
					for _, sz := range []int{100, 8 << 10, 200 << 10, 1 << 20} {
						var b []byte
						var err error
						if round == 1 {
							b, err = p.Alloc(sz)
						} else {
							b, err = tryAllocIn(p, i, uintptr(sz))
						}
						if err != nil {
							refused++
							continue
						}
						live = append(live, b)
					}
				}
				for _, b := range live {
					if err := p.Free(b); err != nil {
						t.Fatal(err)
					}
				}
				live = live[:0]
				_ = p.Trim()
			}
			f.FailAfter(call, 1<<30, fakecuda.ResultOutOfMemory) // none in this test
			for _, n := range []int{3 << 20, 6 << 20} {
				b, err := p.Alloc(n)
				if err != nil {
					t.Errorf("call %d refused after %d: Alloc(%d) with nothing live: %v", call, skip, n, err)
					continue
				}
				if err := p.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	if refused == 0 {
		t.Error("no Alloc was refused: the refusals of cuMemHostRegister never came")
	}
}

// TestOutOfMemoryInPiecesSaysWhy: an Alloc that the capacity refuses while the live buffers
// leave room for it (a small buffer live in each of four shards, each in a 2 MiB chunk of its
// shard's own, so that no two free chunks lie side by side) fails with ErrOutOfMemory, whose
// text says how little is live and what the caller can do (a larger Capacity, fewer Shards),
// not only that the arena's capacity is all reserved. One genuinely full says nothing of it.
func TestOutOfMemoryInPiecesSaysWhy(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newTestPool(t, Options{Backend: Pageable, Capacity: 8 << 20, Shards: 4, PurgeDelay: -1})
	var live [][]byte
	for i := range 4 {
		live = append(live, allocIn(t, p, i, 100))
	}
	_, err := p.Alloc(3 << 20)
	if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, pinmalloc.ErrOutOfMemory) || !errors.Is(err, arena.ErrCapacity) {
		t.Fatalf("Alloc(3 MiB) with 400 bytes live in four shards' chunks: %v, want ErrOutOfMemory", err)
	}
	for _, want := range []string{"400 bytes live of a capacity of 8388608", "larger Capacity", "fewer Shards"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Alloc(3 MiB) with 400 bytes live in four shards' chunks: %q, want it to say %q", err, want)
		}
	}
	if strings.Count(err.Error(), "out of memory") != 1 {
		t.Errorf("%q says out of memory more than once", err)
	}
	for _, b := range live {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}

	// Full: what is live leaves no room, and the error says nothing of pieces.
	b, err := p.Alloc(6 << 20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Alloc(3 << 20)
	if !errors.Is(err, ErrOutOfMemory) || strings.Contains(err.Error(), "pieces") || strings.Contains(err.Error(), "Shards") {
		t.Errorf("Alloc(3 MiB) with 6 MiB live of 8: %v, want ErrOutOfMemory alone", err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
}
