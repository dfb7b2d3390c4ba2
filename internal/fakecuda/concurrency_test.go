package fakecuda_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
)

// TestDeviceHeapConcurrentCopies is the program of issue 8: goroutines, each on its own
// stream, allocate device-heap blocks of up to 4 MiB, fill each with HtoDAsync and a stream
// synchronize, keep a few live, read each back with DtoH before freeing it with FreeAsync on
// its own stream or another's. The fake once lost data here (runs of zeros in live blocks).
// 60 rounds a worker, 200 in the long form (Long); 20 under the race detector (RaceEnabled:
// the four workers' allocations, copies and frees on each other's streams still interleave,
// each round's 2 MiB fill and check, a goroutine's own, cost the detector most of 12 CPU-s).
func TestDeviceHeapConcurrentCopies(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	rounds := 60
	switch {
	case fakecuda.Long():
		rounds = 200
	case fakecuda.RaceEnabled:
		rounds = 20
	}
	if v, err := strconv.Atoi(os.Getenv("FAKECUDA_ROUNDS")); err == nil {
		rounds = v
	}
	var o device.Options
	if v, err := strconv.Atoi(os.Getenv("FAKECUDA_CAPACITY_MIB")); err == nil {
		o.Capacity = int(uintptr(v) << 20)
	}
	h, err := device.New(cuda.Wrap[*pcuda.Device](dev), o)
	if err != nil {
		t.Fatal(err)
	}
	workers, live := 4, 3
	if v, err := strconv.Atoi(os.Getenv("FAKECUDA_WORKERS")); err == nil {
		workers = v
	}
	if v, err := strconv.Atoi(os.Getenv("FAKECUDA_LIVE")); err == nil {
		live = v
	}
	streams := make([]cuda.Stream, workers)
	for i := range streams {
		if streams[i], err = dev.StreamCreate(true); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- worker(h, streams, w, rounds, live)
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		if err := dev.StreamDestroy(s); err != nil {
			t.Fatal(err)
		}
	}
}

type block struct {
	p    cuda.DevicePtr
	data []byte
}

func worker(h *device.Heap, streams []cuda.Stream, w, rounds, keep int) error {
	rng := rand.New(rand.NewSource(int64(w) + 1))
	fill := uint64(w) // the state of the blocks' bytes: rng draws the same sizes and streams as before
	s := streams[w]
	var live []block
	check := func(b block) error {
		got := make([]byte, len(b.data))
		if err := h.DtoH(got, pcuda.DevicePtr(b.p)); err != nil {
			return err
		}
		if !bytes.Equal(got, b.data) {
			i := 0
			for got[i] == b.data[i] {
				i++
			}
			j := i
			for j < len(got) && got[j] != b.data[j] {
				j++
			}
			return fmt.Errorf("worker %d: block %#x of %d bytes differs at [%d, %d): got %x want %x", w, b.p, len(b.data), i, j, got[i:min(i+8, j)], b.data[i:min(i+8, j)])
		}
		return nil
	}
	for r := 0; r < rounds; r++ {
		n := 1 + rng.Intn(4<<20)
		p, err := h.Alloc(int(n), pcuda.Stream(s))
		if err != nil {
			return err
		}
		b := block{p: uintptr(p), data: make([]byte, n)}
		pattern.Random(b.data, &fill)
		src := b.data
		if os.Getenv("FAKECUDA_TEMPSRC") != "" { // a copy the program drops after the call
			src = append([]byte(nil), b.data...)
		}
		if err := h.HtoDAsync(p, src, pcuda.Stream(s)); err != nil {
			return err
		}
		if err := h.Device().StreamSynchronize(pcuda.Stream(s)); err != nil {
			return err
		}
		live = append(live, b)
		if len(live) > keep || r == rounds-1 {
			for len(live) > 0 && (len(live) > keep-1 || r == rounds-1) {
				old := live[0]
				live = live[1:]
				if err := check(old); err != nil {
					return err
				}
				if err := h.FreeAsync(pcuda.DevicePtr(old.p), pcuda.Stream(streams[rng.Intn(len(streams))])); err != nil {
					return err
				}
			}
		}
	}
	return h.Sync()
}
