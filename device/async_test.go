package device

import (
	"bytes"
	"errors"
	"fmt"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"runtime"
	"sync"
	"testing"
	"weak"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// goBytes returns a fresh Go slice of n bytes holding a pattern of seed: the only reference to it
// is the caller's expression, so the slice is garbage as soon as the callee stops using it.
func goBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*131>>7)
	}
	return b
}

// TestFakeAsyncGoSourceGC: a Go-heap source handed to HtoDAsync is garbage once its address is
// taken, unless the heap keeps it: a collection between the address and the driver call (the
// afterAddr hook forces one, then allocates more of the size) must neither free the source
// (a weak pointer to it must still resolve) nor change what reaches the device. Before the
// copies pinned their host buffers, the weak pointer came back nil.
func TestFakeAsyncGoSourceGC(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	defer func() { afterAddr = nil }()
	for i, n := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 10, 64 << 10, 1 << 20} {
		d := alloc(t, h, uintptr(n), s)
		src := goBytes(n, byte(i))
		alive := weak.Make(&src[0])
		var junk [][]byte
		afterAddr = func() {
			runtime.GC()
			if alive.Value() == nil {
				t.Errorf("copy %d: the %d-byte Go source was collected between its address and the driver call", i, n)
			}
			for range 64 { // reuse whatever the collection freed of that size
				junk = append(junk, bytes.Repeat([]byte{0xEE}, n))
			}
		}
		must(t, "HtoDAsync", h.HtoDAsync(pcuda.DevicePtr(d), src, pcuda.Stream(s))) // src is dead from here on
		afterAddr, junk = nil, nil
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		got := make([]byte, n)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(d)))
		if want := goBytes(n, byte(i)); !bytes.Equal(got, want) {
			t.Fatalf("copy %d of %d bytes from a fresh Go slice: the device holds other bytes (first difference at %d)", i, n, firstDiff(got, want))
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(d)))
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestFakeAsyncStress: four goroutines, each on its own stream, copy up to 4 MiB to device
// blocks from fresh Go slices and from buffers of a CUDAHost pool that they free (or hand to
// another goroutine to free) while the copy is still queued, and whose memory the next
// allocation fills with other bytes at once; then they synchronize and read every byte back,
// into Go memory and into pool buffers freed on the stream, while the collector runs. Copies
// from Go memory once lost their sources under the collector in about half the runs, and
// pooled buffers were reused under queued copies.
func TestFakeAsyncStress(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 128 << 20})
	if f == nil {
		return
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 128 << 20})
	must(t, "pinned.New", err)
	rounds := 12
	if longRun() {
		rounds = 40
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	frees := make(chan []byte, 64)
	freed := make(chan struct{})
	go func() { // frees from another goroutine
		defer close(freed)
		for b := range frees {
			if err := pool.Free(b); err != nil {
				errs <- err
			}
		}
	}()
	for g := range 4 {
		s := newStream(t, dev, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- stress(h, pool, frees, dev, s, g, rounds)
		}()
	}
	stop := make(chan struct{})
	go func() { // the collector, busy
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	wg.Wait()
	close(stop)
	close(frees)
	<-freed
	must(t, "pool Close", pool.Close())
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func stress(h *Heap, pool *pinned.Pool, frees chan<- []byte, dev *cuda.Device, s cuda.Stream, g, rounds int) error {
	check := func(what string, got []byte, n int, seed byte, r int) error {
		if want := goBytes(n, seed); !bytes.Equal(got, want) {
			return fmt.Errorf("goroutine %d round %d, %s: %d bytes differ from byte %d", g, r, what, n, firstDiff(got, want))
		}
		return nil
	}
	for r := range rounds {
		n := 1 + (r*7919+g*104729)%(4<<20)
		seed := byte(g*31 + r)
		d1, err := h.Alloc(int(n), pcuda.Stream(s))
		if err != nil {
			return err
		}
		d2, err := h.Alloc(int(n), pcuda.Stream(s))
		if err != nil {
			return err
		}
		if err := h.HtoDAsync(d1, goBytes(n, seed), pcuda.Stream(s)); err != nil {
			return err
		}
		b, err := pool.Alloc(n)
		if err != nil {
			return err
		}
		copy(b, goBytes(n, seed+1))
		if err := h.HtoDAsync(d2, b, pcuda.Stream(s)); err != nil {
			return err
		}
		if r%2 == 0 {
			err = pool.Free(b)
		} else {
			frees <- b
		}
		if err != nil {
			return err
		}
		if c, err := pool.Alloc(n); err == nil { // the next owner, writing at once
			for i := range c {
				c[i] = 0xFF
			}
			frees <- c
		}
		if err := dev.StreamSynchronize(s); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := h.DtoHAsync(got, d1, pcuda.Stream(s)); err != nil { // pageable: written before it returns
			return err
		}
		if err := check("from Go memory", got, n, seed, r); err != nil {
			return err
		}
		c, err := pool.Alloc(n)
		if err != nil {
			return err
		}
		if err := h.DtoHAsync(c, d2, pcuda.Stream(s)); err != nil {
			return err
		}
		if err := dev.StreamSynchronize(s); err != nil {
			return err
		}
		if err := check("from a freed pool buffer", c, n, seed+1, r); err != nil {
			return err
		}
		if err := pool.FreeAsync(c, pcuda.Stream(s)); err != nil {
			return err
		}
		if err := errors.Join(h.FreeAsync(d1, pcuda.Stream(s)), h.FreeAsync(d2, pcuda.Stream(s))); err != nil {
			return err
		}
	}
	return nil
}
