package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestLateWork runs a seeded sequence over several streams where the device work runs as late as
// the fake allows: each block has a home stream, its device writes are left queued there when it is
// released (no synchronize), and it moves to another home now and then while released, the fake's
// queries are held most of the time (nothing completes until a synchronizing call needs it), and
// single user streams are completed at random (CompleteStream), which runs that stream and what it
// waits for, and nothing else. The budget holds 4 of the 28 blocks, so evictions, restores, spare
// VRAM, drops of host copies, frees and Prefetch run all the time. Every read checks every byte: a
// copy ordered after the wrong point (a VRAM slot or host buffer handed on before the copy that
// reads or writes it has run on its stream, a restore not waited for, a release event recorded
// before the write it must cover) reads or leaves other bytes. Four sequences: the gather kernel,
// one copy per job, a host pool of the user's at a quota (host copies dropped), and the kernel with
// a cuEventRecord failing now and then (a batch's, a release's, the Batcher's staging event), where
// a call that fails leaves every block's bytes intact; 1,500 steps each, 6,000 in the long form.
func TestLateWork(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for i, name := range []string{"kernel", "perjob", "quota", "faults"} {
		t.Run(name, func(t *testing.T) {
			o := uvm.Options{DeviceBudget: 4 * lateSize, HostCapacity: 2 * lateBlocks * lateSize, ThrashLapse: -1}
			o.Mover = kernelMover(t, dev)
			switch name {
			case "perjob":
				mv, err := uvm.PerJobMover(public(dev))
				must(t, err)
				o.Mover = mv
			case "quota": // a pool of the user's whose quota makes evictions drop host copies
				pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20,
					Quota: (lateBlocks - 8) * lateSize, PurgeDelay: -1})
				must(t, err)
				t.Cleanup(func() { must(t, pool.Close()) })
				o.HostPool = pool
			}
			st := runLateWork(t, f, dev, o, 0x1a7e+uint64(i), name == "faults")
			if name == "quota" && st.HostCopiesDropped == 0 {
				t.Error("no host copy was dropped at the pool's quota")
			}
		})
	}
}

// The blocks of TestLateWork: their size and number.
const lateSize, lateBlocks = 16 * kib, 28

// lateBlock is the model of a block of TestLateWork.
type lateBlock struct {
	h    uvm.Handle
	home cuda.Stream // the stream every device use of the block is on
	want []byte      // nil until first written
	pins int         // acquisitions on home
	ptr  cuda.DevicePtr
}

func runLateWork(t *testing.T, f *fakecuda.Driver, dev *icuda.Device, o uvm.Options, seed uint64, faults bool) uvm.Stats {
	const size, blocks = lateSize, lateBlocks
	rng := rand.New(rand.NewPCG(seed, 7))
	tr := newTier(t, dev, o)
	streams := make([]cuda.Stream, 4)
	for i := range streams {
		streams[i] = stream(t, dev)
	}
	fill := func() []byte {
		b := make([]byte, size)
		for i := 0; i < size; i += 8 {
			v := rng.Uint64()
			for k := 0; k < 8; k++ {
				b[i+k] = byte(v >> (8 * k))
			}
		}
		return b
	}
	bs := make([]*lateBlock, blocks)
	newBlock := func(i int) {
		h, err := tr.Alloc(size)
		must(t, err)
		bs[i] = &lateBlock{h: h, home: streams[rng.IntN(len(streams))]}
	}
	for i := range bs {
		newBlock(i)
	}
	defer f.Hold(false)
	steps := 1500
	if longRun() {
		steps = 6000
	}
	var ops [14]int
	// With faults, a cuEventRecord fails now and then (the tier's batches', its release events',
	// the Batcher's staging events): a call that fails so leaves the blocks where they were, a
	// Release or Free ends the use or frees the block anyway (their documented contracts).
	injected := 0
	failed := func(err error) bool {
		if faults && errors.Is(err, pinmalloc.ErrInvalidValue) {
			injected++
			return true
		}
		return false
	}
	ended := func(err error) {
		t.Helper()
		if err != nil && !failed(err) {
			t.Fatal(err)
		}
	}
	var held []*lateBlock // one entry per acquisition, oldest first
	pinned := 0
	for step := 0; step < steps; step++ {
		m := bs[rng.IntN(blocks)]
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d, block %#x (home %#x): %s", step, uint64(m.h), m.home, fmt.Sprintf(format, args...))
		}
		checkDev := func(p cuda.DevicePtr, what string) {
			t.Helper()
			if m.want != nil && !bytes.Equal(readDev(t, dev, m.home, p, size), m.want) {
				fail("%s: the device bytes differ from the last written", what)
			}
		}
		op := rng.IntN(100)
		switch {
		case op < 4 && m.pins == 0: // hand the block to another stream, its writes still queued
			m.home = streams[rng.IntN(len(streams))]
			ops[13]++
		case op < 30: // acquire on the home stream, write (left queued) or read
			if pinned >= 3 { // leave room in the budget: release the oldest acquisition first
				o := held[0]
				held = held[1:]
				ended(tr.Release(o.h, o.home))
				o.pins--
				pinned--
			}
			mode := uvm.Mode(rng.IntN(2))
			p, err := tr.Acquire(m.h, m.home, mode)
			if errors.Is(err, uvm.ErrAllPinned) || errors.Is(err, uvm.ErrAcquired) || errors.Is(err, uvm.ErrHostFull) || failed(err) {
				continue
			}
			if err != nil {
				fail("Acquire: %v", err)
			}
			if m.pins > 0 && p != m.ptr {
				fail("an acquired block moved")
			}
			m.ptr = p
			m.pins++
			pinned++
			held = append(held, m)
			if mode == uvm.Read || rng.IntN(3) == 0 {
				checkDev(p, "acquire")
			}
			if mode == uvm.Write {
				m.want = fill()
				writeDev(t, dev, m.home, p, m.want)
			}
			ops[0]++
		case op < 55: // release, the block's writes still queued on its stream
			if len(held) == 0 {
				continue
			}
			k := rng.IntN(len(held))
			o := held[k]
			held = append(held[:k], held[k+1:]...)
			ended(tr.Release(o.h, o.home))
			o.pins--
			pinned--
			ops[1]++
			if o.pins > 0 || rng.IntN(3) != 0 {
				continue
			}
			// Handed at once to another stream, which reads it: on the device still, most
			// often, with the writes of its old home queued.
			o.home = streams[rng.IntN(len(streams))]
			p, err := tr.Acquire(o.h, o.home, uvm.Read)
			if errors.Is(err, uvm.ErrAllPinned) || errors.Is(err, uvm.ErrAcquired) || errors.Is(err, uvm.ErrHostFull) || failed(err) {
				continue
			}
			if err != nil {
				fail("Acquire on a new stream: %v", err)
			}
			if o.want != nil && !bytes.Equal(readDev(t, dev, o.home, p, size), o.want) {
				fail("acquired on a new stream: the device bytes differ from the last written on the old")
			}
			o.ptr = p
			o.pins++
			pinned++
			held = append(held, o)
			ops[12]++
		case op < 63: // read on the host
			if m.pins > 0 {
				continue
			}
			b, err := tr.AcquireHost(m.h, uvm.Read)
			if errors.Is(err, uvm.ErrHostFull) || failed(err) {
				continue
			}
			if err != nil {
				fail("AcquireHost: %v", err)
			}
			ok := m.want == nil || bytes.Equal(b, m.want)
			must(t, tr.ReleaseHost(m.h))
			if !ok {
				fail("the host bytes differ from the last written")
			}
			ops[2]++
		case op < 68: // write on the host
			if m.pins > 0 {
				continue
			}
			b, err := tr.AcquireHost(m.h, uvm.Write)
			if errors.Is(err, uvm.ErrHostFull) || failed(err) {
				continue
			}
			if err != nil {
				fail("AcquireHost for writing: %v", err)
			}
			m.want = fill()
			copy(b, m.want)
			must(t, tr.ReleaseHost(m.h))
			ops[3]++
		case op < 76: // evict a few blocks
			var hs []uvm.Handle
			for range 1 + rng.IntN(4) {
				if o := bs[rng.IntN(blocks)]; o.pins == 0 {
					hs = append(hs, o.h)
				}
			}
			if err := tr.Evict(hs); err != nil && !errors.Is(err, uvm.ErrHostFull) && !failed(err) {
				fail("Evict: %v", err)
			}
			ops[4]++
		case op < 82: // prefetch a few blocks onto a stream
			var hs []uvm.Handle
			for range 1 + rng.IntN(3) {
				hs = append(hs, bs[rng.IntN(blocks)].h)
			}
			err := tr.Prefetch(hs, streams[rng.IntN(len(streams))])
			if err != nil && !errors.Is(err, uvm.ErrAllPinned) && !errors.Is(err, uvm.ErrTooLarge) && !errors.Is(err, uvm.ErrAcquired) &&
				!errors.Is(err, uvm.ErrHostFull) && !failed(err) {
				fail("Prefetch: %v", err)
			}
			ops[5]++
		case op < 88: // free (acquired or not, or just evicted) and make a new block in its place
			if m.pins == 0 && rng.IntN(2) == 0 {
				if err := tr.Evict([]uvm.Handle{m.h}); err != nil && !errors.Is(err, uvm.ErrHostFull) && !failed(err) {
					fail("Evict: %v", err)
				}
			}
			ended(tr.Free(m.h))
			for k := 0; k < len(held); k++ {
				if held[k] == m {
					held = append(held[:k], held[k+1:]...)
					pinned--
					k--
				}
			}
			i := 0
			for bs[i] != m {
				i++
			}
			newBlock(i)
			ops[6]++
		case op < 93 && faults && rng.IntN(2) == 0: // a record fails soon
			f.FailAfter(fakecuda.CallRecord, rng.IntN(6), fakecuda.ResultInvalidValue)
			ops[11]++
		case op < 94: // one user stream runs, with what it waits for, and nothing else
			f.CompleteStream(icuda.Stream(streams[rng.IntN(len(streams))]))
			ops[7]++
		case op < 97:
			f.Hold(rng.IntN(4) != 0) // held three times in four
			ops[8]++
		case op < 99:
			f.Complete()
			ops[9]++
		default:
			must(t, tr.Sync())
			ops[10]++
		}
		if err := tr.Verify(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	f.Hold(false)
	if faults { // no failure armed any more
		f.FailAfter(fakecuda.CallRecord, 1<<30, fakecuda.ResultInvalidValue)
	}
	for _, m := range bs {
		for ; m.pins > 0; m.pins-- {
			must(t, tr.Release(m.h, m.home))
		}
	}
	for _, m := range bs { // on the host, or on the device where the host pool is full
		if m.want == nil {
			continue
		}
		var got []byte
		b, err := tr.AcquireHost(m.h, uvm.Read)
		if errors.Is(err, uvm.ErrHostFull) {
			p, err := tr.Acquire(m.h, m.home, uvm.Read)
			must(t, err)
			got = readDev(t, dev, m.home, p, size)
			must(t, tr.Release(m.h, m.home))
		} else {
			must(t, err)
			got = bytes.Clone(b)
			must(t, tr.ReleaseHost(m.h))
		}
		if !bytes.Equal(got, m.want) {
			t.Fatalf("at the end: block %#x: its bytes differ from the last written", uint64(m.h))
		}
	}
	st := tr.Stats()
	t.Logf("ops %v, %d failed by a fault; hits %d misses %d, in %+v out %+v, clean evictions %d, host copies dropped %d",
		ops, injected, st.Hits, st.Misses, st.Moved(true), st.Moved(false), st.CleanEvictions, st.HostCopiesDropped)
	if st.Moved(false).Blocks == 0 || st.Misses == 0 {
		t.Error("nothing moved at 7 times the budget")
	}
	if faults && (injected == 0 || st.Failures == 0) {
		t.Errorf("%d calls failed by a fault, %d batches failed: the run wants both", injected, st.Failures)
	}
	return st
}
