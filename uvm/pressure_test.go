package uvm_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSharedHeapPressure shares a device heap between a tier and another user: the tier fills
// it with dirty blocks, and the other user's Alloc, which finds the heap full, succeeds because
// the heap's pressure hook made the tier evict cold blocks (an acquired block stays where it
// is). Every block keeps its bytes; the hook the tier replaced is back after Close.
func TestSharedHeapPressure(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, n = 256 * kib, 24
	var prevCalls int
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256,
		Pressure: func(int, cuda.Stream) bool { prevCalls++; return false }})
	must(t, err)
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: n * size, Heap: h})
	must(t, err)
	s, su := stream(t, dev), stream(t, dev)
	hs := make([]uvm.Handle, n)
	for i := range hs {
		hs[i], err = tr.Alloc(size)
		must(t, err)
		p, err := tr.Acquire(hs[i], s, uvm.Write)
		must(t, err)
		writeDev(t, dev, s, p, pattern(byte(i), size))
		if i > 0 {
			must(t, tr.Release(hs[i], s))
		}
	}
	pinnedPtr, err := tr.Acquire(hs[0], s, uvm.Read) // block 0 stays acquired (twice)
	must(t, err)
	before := tr.Stats()
	if before.DeviceBytes != n*size {
		t.Fatalf("the tier holds %d device bytes, want %d", before.DeviceBytes, n*size)
	}

	// Another user of the heap, on its own stream: 4 MiB does not fit beside the tier's 6.
	p, err := h.Alloc(4<<20, su)
	if err != nil {
		t.Fatalf("another user's Alloc on the shared heap: %v (tier stats %+v)", err, tr.Stats())
	}
	st := tr.Stats()
	checkAccounts(t, st)
	out := st.Out[uvm.CauseHeapPressure]
	if out.Blocks == 0 || st.HeapPressure == before.HeapPressure || st.DeviceBytes >= before.DeviceBytes {
		t.Fatalf("no eviction for the heap: %+v", st)
	}
	if prevCalls != 0 {
		t.Errorf("the replaced hook was called %d times although the tier could evict", prevCalls)
	}
	t.Logf("the other user's 4 MiB made the tier evict %d blocks (%d bytes)", out.Blocks, out.Bytes)
	if q, err := tr.Acquire(hs[0], s, uvm.Read); err != nil || q != pinnedPtr {
		t.Fatalf("the acquired block moved: %#x, %v (was %#x)", q, err, pinnedPtr)
	}
	must(t, tr.Release(hs[0], s))
	must(t, tr.Release(hs[0], s))
	must(t, tr.Release(hs[0], s))

	// While the other user holds its memory, the tier still serves every block, within what
	// is left; give it back, and every block comes back with its bytes.
	must(t, h.FreeAsync(p, su))
	for i, hd := range hs {
		q, err := tr.Acquire(hd, s, uvm.Read)
		must(t, err)
		if !bytes.Equal(readDev(t, dev, s, q, size), pattern(byte(i), size)) {
			t.Fatalf("block %d lost its bytes", i)
		}
		must(t, tr.Release(hd, s))
	}

	// With nothing evictable, the hook passes the call on to the one it replaced.
	for _, hd := range hs {
		_, err := tr.Acquire(hd, s, uvm.Read)
		must(t, err)
	}
	if _, err := h.Alloc(4<<20, su); err == nil || prevCalls == 0 {
		t.Errorf("an Alloc with every tier block acquired: %v, %d calls of the replaced hook", err, prevCalls)
	}
	for _, hd := range hs {
		must(t, tr.Release(hd, s))
		must(t, tr.Free(hd))
	}
	must(t, tr.Close())
	if st := h.Stats(); st.Streams != 1 || st.Live != 0 {
		t.Errorf("after the tier's Close the shared heap has %d streams (want the other user's only) and %d live blocks", st.Streams, st.Live)
	}
	if prev := h.SetPressure(nil); prev == nil {
		t.Error("Close did not put the replaced hook back")
	} else if prevCalls = 0; prev(1, su) || prevCalls != 1 {
		t.Error("the hook put back is not the one the tier replaced")
	}
	must(t, h.ForgetStream(su))
	must(t, h.ForgetStream(s))
	if err := h.Close(); err != nil && !errors.Is(err, device.ErrClosed) {
		t.Fatal(err)
	}
}

// TestSharedHeapConcurrent runs goroutines acquiring, writing, releasing and checking blocks
// of a tier over a shared heap while another user of the heap allocates and frees big blocks
// on its own stream, so that the heap's pressure hook (which takes the tier's lock) runs
// beside the tier's own allocations (which hold it while the heap allocates): no deadlock, no
// race (run with -race), every block's bytes intact. 15 rounds over each worker's blocks, 5
// under the race detector (the workers' acquires still meet the other user's allocations and
// the pressure hook: each round is 24 acquires a worker).
func TestSharedHeapConcurrent(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, workers, per = 64 * kib, 4, 24
	rounds := 15
	if raceEnabled {
		rounds = 5
	}
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256})
	must(t, err)
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 5 << 20, Heap: h})
	must(t, err)
	su := stream(t, dev)
	streams := make([]cuda.Stream, workers)
	for i := range streams {
		streams[i] = stream(t, dev)
	}
	done := make(chan struct{})
	var other sync.WaitGroup
	other.Add(1)
	var got, refused int
	go func() { // the other user
		defer other.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			p, err := h.Alloc(4<<20, su)
			if err != nil {
				refused++
				time.Sleep(50 * time.Microsecond)
				continue
			}
			got++
			time.Sleep(100 * time.Microsecond)
			if err := h.FreeAsync(p, su); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := streams[w]
			hs := make([]uvm.Handle, per)
			gen := make([]byte, per)
			for i := range hs {
				var err error
				if hs[i], err = tr.Alloc(size); err != nil {
					t.Error(err)
					return
				}
			}
			for round := 1; round <= rounds; round++ {
				for i, hd := range hs {
					p, err := tr.AcquireContext(context.Background(), hd, s, uvm.Write)
					if err != nil {
						t.Errorf("worker %d: Acquire: %v", w, err)
						return
					}
					if gen[i] != 0 && !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(w*50+i)+gen[i], size)) {
						t.Errorf("worker %d block %d: bytes differ in round %d", w, i, round)
					}
					gen[i] = byte(round)
					writeDev(t, dev, s, p, pattern(byte(w*50+i)+gen[i], size))
					if err := tr.Release(hd, s); err != nil {
						t.Error(err)
						return
					}
				}
			}
			for _, hd := range hs {
				if err := tr.Free(hd); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatal("deadlock: the workers did not finish")
	}
	close(done)
	other.Wait()
	st := tr.Stats()
	t.Logf("the other user got 4 MiB %d times (refused %d); the tier evicted %d blocks for the heap, %d for its budget",
		got, refused, st.Out[uvm.CauseHeapPressure].Blocks, st.Out[uvm.CausePressure].Blocks)
	if got == 0 || st.Out[uvm.CauseHeapPressure].Blocks == 0 {
		t.Errorf("the other user never got memory through the tier's evictions: %+v", st)
	}
	must(t, tr.Close())
	must(t, h.ForgetStream(su))
	must(t, h.Close())
}

// TestSpareVRAM checks the tier's spare VRAM (spare.go): the VRAM an eviction gives up is kept
// for the next restore, which takes it instead of the heap's; the heap refusing a block of
// another size makes the tier give its spares back; another user of a shared heap that finds it
// full gets them back without an eviction; Close gives them back.
func TestSpareVRAM(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const budget = 4 << 20
	h, err := device.New(public(dev), device.Options{Capacity: 6 << 20, Align: 256, PurgeDelay: -1})
	must(t, err)
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: budget, Heap: h})
	must(t, err)
	s, su := stream(t, dev), stream(t, dev)
	small := filled(t, tr, budget/(64*kib), 64*kib)
	acquire := func(hs []uvm.Handle) []cuda.DevicePtr { return acquireAll(t, tr, s, uvm.Write, hs) }
	first := acquire(small)
	live := h.Stats().Live
	must(t, tr.Evict(small))
	must(t, tr.Sync())
	st := tr.Stats()
	checkAccounts(t, st)
	if st.SpareBytes != budget || st.DeviceBytes != 0 || h.Stats().Live != live {
		t.Fatalf("after evicting every block: %d spare bytes, %d on the device, %d live heap blocks (want %d, 0, %d)",
			st.SpareBytes, st.DeviceBytes, h.Stats().Live, budget, live)
	}
	// The restore takes the spare blocks: the same VRAM, no heap allocation.
	allocs := h.Stats().Allocs
	again := acquire(small)
	if st := tr.Stats(); st.SpareBytes != 0 || h.Stats().Allocs != allocs {
		t.Fatalf("the restore left %d spare bytes and made %d heap allocations", st.SpareBytes, h.Stats().Allocs-allocs)
	}
	seen := map[cuda.DevicePtr]bool{}
	for _, p := range first {
		seen[p] = true
	}
	for i, p := range again {
		if !seen[p] {
			t.Fatalf("block %d came back at %#x, not in the VRAM the eviction gave up", i, p)
		}
	}

	// Spare 64 KiB blocks, then a block of 2 MiB, which the heap has no room for beside
	// them: the tier gives them back and retries.
	must(t, tr.Evict(small))
	must(t, tr.Sync())
	big := filled(t, tr, 2, 2<<20)
	acquire(big)
	st = tr.Stats()
	checkAccounts(t, st)
	if st.DeviceBytes != 4<<20 || st.SpareBytes != 0 || st.Failures != 0 {
		t.Fatalf("after restoring 4 MiB of big blocks beside 4 MiB of spare small ones: %+v", st)
	}

	// Another user of the heap gets the spares back (the big blocks' VRAM) with no eviction.
	must(t, tr.Evict(big))
	must(t, tr.Sync())
	if st := tr.Stats(); st.SpareBytes != 4<<20 {
		t.Fatalf("%d spare bytes after evicting the big blocks, want %d", st.SpareBytes, 4<<20)
	}
	acquire(small[:8])
	before := tr.Stats()
	p, err := h.Alloc(2<<20, su) // a huge block: chunks of the arena, which the spares hold
	must(t, err)
	st = tr.Stats()
	checkAccounts(t, st)
	if st.SpareBytes != 0 || st.Moved(false) != before.Moved(false) || st.HeapPressure != before.HeapPressure+1 {
		t.Fatalf("the other user's Alloc: %d spare bytes left, %d blocks evicted, %d pressure calls",
			st.SpareBytes, st.Moved(false).Blocks-before.Moved(false).Blocks, st.HeapPressure-before.HeapPressure)
	}
	must(t, h.FreeAsync(p, su))

	// Close gives the spares back: the heap has no live block of the tier's.
	must(t, tr.Evict(small[:8]))
	must(t, tr.Sync())
	if tr.Stats().SpareBytes == 0 {
		t.Fatal("no spare VRAM before Close")
	}
	for _, hd := range append(small, big...) {
		must(t, tr.Free(hd))
	}
	must(t, tr.Close())
	must(t, h.Sync())
	if st := h.Stats(); st.Live != 0 {
		t.Errorf("after the tier's Close the heap has %d live blocks", st.Live)
	}
	must(t, h.ForgetStream(su))
	must(t, h.ForgetStream(s))
	must(t, h.Close())
}
