package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// model is what a property test knows of a block.
type model struct {
	h    uvm.Handle
	n    int
	want []byte // nil until first written
	ptr  cuda.DevicePtr
	s    cuda.Stream
	pins int
}

// kernelMover returns a copyengine.Batcher that launches the gather kernel (the fake runs its
// semantics in C), closed at cleanup.
func kernelMover(t testing.TB, dev *icuda.Device) *copyengine.Batcher {
	t.Helper()
	b, err := copyengine.New(public(dev), copyengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Method() != copyengine.MethodKernel {
		t.Fatalf("the Batcher chose %s, want the kernel", b.Method())
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Batcher.Close: %v", err)
		}
	})
	return b
}

// flakyMover fails the copies it is told to, and passes the rest to another mover (the
// kernel's).
type flakyMover struct {
	mu   sync.Mutex
	next uvm.Mover
	fail int // fail this many of the next calls
}

var errInjected = errors.New("injected copy failure")

func (m *flakyMover) Copy(jobs []uvm.CopyJob, s cuda.Stream) error {
	m.mu.Lock()
	fail := m.fail > 0
	if fail {
		m.fail--
	}
	m.mu.Unlock()
	if fail {
		return errInjected
	}
	return m.next.Copy(jobs, s)
}

func (m *flakyMover) failNext(n int) {
	m.mu.Lock()
	m.fail = n
	m.mu.Unlock()
}

// TestProperty runs long random sequences of alloc, acquire (read, write), device and host
// writes, release, prefetch, evict, free and injected copy failures, at 1 to 4 times the
// budget, with the fake's streams held and completed at random, and checks after every step
// that every block holds exactly what was last written, an acquired block never moves, and
// device + host + fresh bytes equal the live bytes. 1,000 steps each; 5,000 in the long form
// (longRun); 500 under the race detector (one goroutine's sequence, beside the fake's streams:
// the non-race runs take it at full length).
func TestProperty(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for over := 1; over <= 4; over++ {
		for _, pol := range []func() uvm.Policy{uvm.LRU, uvm.TwoQ} {
			t.Run(fmt.Sprintf("%dx/%s", over, pol().Name()), func(t *testing.T) {
				runProperty(t, f, dev, over, pol(), uint64(over)*7919)
			})
		}
	}
}

func runProperty(t *testing.T, f *fakecuda.Driver, dev *icuda.Device, over int, pol uvm.Policy, seed uint64) {
	const budget = 1 << 20
	rng := rand.New(rand.NewPCG(seed, 42))
	mv := &flakyMover{next: kernelMover(t, dev)}
	jobs := f.GatherJobs()
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: budget, Policy: pol, Mover: mv, ThrashLapse: -1})
	must(t, err)
	streams := []cuda.Stream{stream(t, dev), stream(t, dev)}
	var blocks []*model
	live := 0
	sizes := []int{4 * kib, 16*kib + 100, 64 * kib, 200 * kib}
	checkDev := func(m *model, p cuda.DevicePtr, s cuda.Stream, what string) {
		t.Helper()
		if m.want != nil && !bytes.Equal(readDev(t, dev, s, p, m.n), m.want) {
			t.Fatalf("%s: block %#x (%d bytes): device bytes differ", what, m.h, m.n)
		}
	}
	pick := func() *model {
		if len(blocks) == 0 {
			return nil
		}
		return blocks[rng.IntN(len(blocks))]
	}
	injected := 0
	steps := 1000
	switch {
	case longRun():
		steps = 5000
	case raceEnabled:
		steps = 500
	}
	for step := 0; step < steps; step++ {
		switch op := rng.IntN(100); {
		case op < 12: // alloc
			n := sizes[rng.IntN(len(sizes))]
			if live+n > over*budget {
				continue
			}
			h, err := tr.Alloc(n)
			must(t, err)
			blocks = append(blocks, &model{h: h, n: n})
			live += n
		case op < 40: // acquire
			m := pick()
			if m == nil {
				continue
			}
			s := streams[rng.IntN(2)]
			if m.pins > 0 {
				s = m.s
			}
			mode := uvm.Mode(rng.IntN(2))
			if rng.IntN(20) == 0 {
				mv.failNext(1)
			}
			p, err := tr.Acquire(m.h, s, mode)
			if errors.Is(err, errInjected) {
				injected++
				mv.failNext(0)
				continue
			}
			if errors.Is(err, uvm.ErrAllPinned) {
				mv.failNext(0)
				continue
			}
			must(t, err)
			mv.failNext(0)
			if m.pins > 0 && p != m.ptr {
				t.Fatalf("step %d: acquired block %#x moved from %#x to %#x", step, m.h, m.ptr, p)
			}
			checkDev(m, p, s, "acquire")
			m.ptr, m.s = p, s
			m.pins++
			if mode == uvm.Write {
				m.want = make([]byte, m.n)
				for i := range m.want {
					m.want[i] = byte(rng.Uint32())
				}
				writeDev(t, dev, s, p, m.want)
			}
		case op < 62: // release
			m := pick()
			if m == nil || m.pins == 0 {
				continue
			}
			checkDev(m, m.ptr, m.s, "release")
			must(t, tr.Release(m.h, m.s))
			m.pins--
		case op < 72: // host access
			m := pick()
			if m == nil || m.pins > 0 {
				continue
			}
			mode := uvm.Mode(rng.IntN(2))
			b, err := tr.AcquireHost(m.h, mode)
			if errors.Is(err, uvm.ErrHostFull) {
				continue
			}
			must(t, err)
			if m.want != nil && !bytes.Equal(b, m.want) {
				t.Fatalf("step %d: block %#x: host bytes differ", step, m.h)
			}
			if mode == uvm.Write {
				m.want = make([]byte, m.n)
				for i := range m.want {
					m.want[i] = byte(rng.Uint32())
				}
				copy(b, m.want)
			}
			must(t, tr.ReleaseHost(m.h))
		case op < 80: // prefetch
			var hs []uvm.Handle
			for i := rng.IntN(4); i >= 0; i-- {
				if m := pick(); m != nil {
					hs = append(hs, m.h)
				}
			}
			if err := tr.Prefetch(hs, streams[rng.IntN(2)]); err != nil && !errors.Is(err, uvm.ErrAllPinned) && !errors.Is(err, uvm.ErrTooLarge) {
				t.Fatalf("step %d: Prefetch: %v", step, err)
			}
		case op < 88: // evict
			var hs []uvm.Handle
			for i := rng.IntN(4); i >= 0; i-- {
				if m := pick(); m != nil && m.pins == 0 {
					hs = append(hs, m.h)
				}
			}
			if rng.IntN(10) == 0 {
				mv.failNext(1)
			}
			err := tr.Evict(hs)
			if errors.Is(err, errInjected) {
				injected++
			} else {
				must(t, err)
			}
			mv.failNext(0)
		case op < 95: // free
			m := pick()
			if m == nil {
				continue
			}
			must(t, tr.Free(m.h))
			for i, b := range blocks {
				if b == m {
					blocks = append(blocks[:i], blocks[i+1:]...)
					break
				}
			}
			live -= m.n
		case op < 97:
			f.Hold(rng.IntN(2) == 0)
		case op < 99:
			f.Complete()
		default:
			must(t, tr.Sync())
		}
		checkAccounts(t, tr.Stats())
		if err := tr.Verify(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	f.Hold(false)
	f.Complete()
	// Every block, read back on the host, holds what was last written.
	for _, m := range blocks {
		for m.pins > 0 {
			must(t, tr.Release(m.h, m.s))
			m.pins--
		}
		b, err := tr.AcquireHost(m.h, uvm.Read)
		must(t, err)
		if m.want != nil && !bytes.Equal(b, m.want) {
			t.Fatalf("at the end: block %#x: host bytes differ", m.h)
		}
		must(t, tr.ReleaseHost(m.h))
	}
	st := tr.Stats()
	t.Logf("%d blocks live, hits %d misses %d, in %+v, out %+v, clean evictions %d, failures %d (injected %d)",
		st.Blocks, st.Hits, st.Misses, st.Moved(true), st.Moved(false), st.CleanEvictions, st.Failures, injected)
	if over > 1 && (st.Moved(false).Blocks == 0 || st.Misses == 0) {
		t.Errorf("oversubscribed %dx but nothing was evicted", over)
	}
	if injected == 0 || st.Failures < uint64(injected) {
		t.Errorf("injected %d failures, the tier counted %d", injected, st.Failures)
	}
	if copied := st.Moved(true).Blocks + st.Moved(false).Blocks - st.CleanEvictions; uint64(f.GatherJobs()-jobs) != copied {
		t.Errorf("%d blocks copied, the gather kernel ran %d jobs", copied, f.GatherJobs()-jobs)
	}
	must(t, tr.Close())
}

// TestEvictionFailure checks that a copy failing during an eviction leaves the victim on the
// device with its bytes and surfaces the error, and that a failing restore leaves the host copy
// intact.
func TestEvictionFailure(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	mv := &flakyMover{next: kernelMover(t, dev)}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 2 * size, Mover: mv})
	s := stream(t, dev)
	hs := allocN(t, tr, 3, size)
	for i, h := range hs[:2] {
		p, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		writeDev(t, dev, s, p, pattern(byte(i), size))
		must(t, tr.Release(h, s))
	}
	mv.failNext(1)
	if _, err := tr.Acquire(hs[2], s, uvm.Write); !errors.Is(err, errInjected) {
		t.Fatalf("Acquire whose eviction fails: %v", err)
	}
	st := tr.Stats()
	checkAccounts(t, st)
	if st.DeviceBytes != 2*size || st.Failures != 1 || st.Moved(false).Blocks != 0 {
		t.Fatalf("after the failed eviction: %+v", st)
	}
	for i, h := range hs[:2] {
		p, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		if !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(i), size)) {
			t.Fatalf("block %d lost its bytes in the failed eviction", i)
		}
		must(t, tr.Release(h, s))
	}
	// Evict block 0 for real; then fail its restore.
	must(t, tr.Evict(hs[:1]))
	mv.failNext(1)
	if _, err := tr.Acquire(hs[0], s, uvm.Read); !errors.Is(err, errInjected) {
		t.Fatalf("Acquire whose restore fails: %v", err)
	}
	if st := tr.Stats(); st.HostBytes != size || st.DeviceBytes != size {
		t.Fatalf("after the failed restore: %+v", st)
	}
	p, err := tr.Acquire(hs[0], s, uvm.Read)
	must(t, err)
	if !bytes.Equal(readDev(t, dev, s, p, size), pattern(0, size)) {
		t.Fatal("the host copy did not survive the failed restore")
	}
	must(t, tr.Release(hs[0], s))
	for _, h := range hs {
		must(t, tr.Free(h))
	}
}

// TestHostFull makes the host pool refuse memory (the driver refuses to register it: the pool
// runs on the registration fallback, as on a driver without VMM host memory): the eviction
// fails with ErrHostFull and the block stays on the device, intact.
func TestHostFull(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(false)
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 2 * size})
	s := stream(t, dev)
	hs := allocN(t, tr, 3, size)
	for i, h := range hs[:2] {
		p, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		writeDev(t, dev, s, p, pattern(byte(i), size))
		must(t, tr.Release(h, s))
	}
	f.FailRegister(100, fakecuda.ResultOutOfMemory)
	if _, err := tr.Acquire(hs[2], s, uvm.Write); !errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("Acquire whose eviction finds the host full: %v", err)
	}
	f.FailRegister(0, 0)
	st := tr.Stats()
	checkAccounts(t, st)
	if st.Failures != 0 || st.Moved(false).Blocks != 0 { // a full host is not a failed copy
		t.Fatalf("after the eviction refused for a full host: %+v", st)
	}
	for i, h := range hs[:2] {
		p, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		if !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(i), size)) {
			t.Fatalf("block %d lost its bytes", i)
		}
		must(t, tr.Release(h, s))
	}
	_, err := tr.Acquire(hs[2], s, uvm.Write) // the host has room again
	must(t, err)
	must(t, tr.Release(hs[2], s))
	for _, h := range hs {
		must(t, tr.Free(h))
	}
}
