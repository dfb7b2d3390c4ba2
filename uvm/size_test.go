package uvm_test

import (
	"bytes"
	"fmt"
	"testing"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestBlockSizes moves blocks of 4 KiB to 3 MiB and a page, 8 MiB too in the long form (sizes
// inside a segment, a whole chunk, across chunks, huge) through a tier at twice its budget, on both
// host providers: VMM host granules and the registration fallback of drivers without VMM host
// memory. The fake refuses a copy whose host range is not one DMA range, as the driver does; every
// block must still be one job of the copy kernel, its bytes intact each way. Under the race
// detector it skips: one goroutine's blocks through the tier; the non-race runs hold it.
func TestBlockSizes(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine's block sizes through a tier, mostly bytes filled and checked: nothing for the race detector; the non-race runs (default and PINMALLOC_LONG) hold it")
	}
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	sizes := []int{4 * kib, 16 * kib, 64 * kib, 256 * kib, 1 << 20, 2 << 20, 3<<20 + 4*kib}
	if longRun() {
		sizes = append(sizes, 8<<20) // the same paths as 3 MiB, with more bytes
	}
	for _, vmm := range []bool{true, false} {
		name := "vmm"
		if !vmm {
			name = "registered"
		}
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%s/%dKiB", name, size/kib), func(t *testing.T) {
				f.SetHostVMM(vmm)
				defer f.SetHostVMM(true)
				runSizes(t, f, dev, size)
			})
		}
	}
}

func runSizes(t *testing.T, f *fakecuda.Driver, dev *icuda.Device, size int) {
	const n = 4
	tr := newTier(t, dev, uvm.Options{DeviceBudget: int(2 * size)})
	s := stream(t, dev)
	launches, jobs := f.Launches(), f.GatherJobs()
	hs := filled(t, tr, n, size)
	for round := 0; round < 2; round++ {
		for i, h := range hs {
			p, err := tr.Acquire(h, s, uvm.Write)
			must(t, err)
			if got := readDev(t, dev, s, p, size); !bytes.Equal(got, pattern(byte(i+round), size)) {
				t.Fatalf("round %d block %d: device bytes differ", round, i)
			}
			writeDev(t, dev, s, p, pattern(byte(i+round+1), size))
			must(t, tr.Release(h, s))
		}
	}
	must(t, tr.Evict(hs))
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(b, pattern(byte(i+2), size)) {
			t.Fatalf("block %d: host bytes differ after the eviction", i)
		}
		must(t, tr.ReleaseHost(h))
	}
	st := tr.Stats()
	checkAccounts(t, st)
	copied := st.Moved(true).Blocks + st.Moved(false).Blocks - st.CleanEvictions
	if st.Mover != "kernel" || copied == 0 || uint64(f.GatherJobs()-jobs) != copied || f.Launches() == launches {
		t.Errorf("mover %q: %d blocks copied, the kernel ran %d jobs in %d launches", st.Mover, copied,
			f.GatherJobs()-jobs, f.Launches()-launches)
	}
	for _, h := range hs {
		must(t, tr.Free(h))
	}
}
