package pinned_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/probe"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// copyOn copies b to device dev and back (the copy's device is the current context's) and
// returns the error of the first refused copy.
func copyOn(t *testing.T, f *fakecuda.Driver, dev int, b []byte) error {
	t.Helper()
	d, err := cuda.Open(dev)
	must(t, "cuda.Open", err)
	defer func() { must(t, "Close", d.Close()) }()
	p, err := d.MemAlloc(uintptr(len(b)))
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(p)) }()
	if err := d.MemcpyHtoD(p, mem.Addr(b), uintptr(len(b))); err != nil {
		return err
	}
	return d.MemcpyDtoH(mem.Addr(b), p, uintptr(len(b)))
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	probe.Pause()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestFakeDevicesAccess: VMM host memory is granted to Device and every device of Devices, and
// the fake, as strict as the driver, refuses a copy by any other device; an ordinal the driver
// lacks is refused by New.
func TestFakeDevicesAccess(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(4)
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 256 << 20, Device: 1, Devices: []int{0, 3}})
	b, err := p.Alloc(3 << 20)
	must(t, "Alloc", err)
	for dev, ok := range map[int]bool{0: true, 1: true, 2: false, 3: true} {
		err := copyOn(t, f, dev, b)
		if ok && err != nil || !ok && !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("copy by device %d = %v (granted %v)", dev, err, ok)
		}
	}
	must(t, "Free", p.Free(b))
	closePool(t, f, p)
	for _, devs := range [][]int{{4}, {-1}} {
		for _, be := range []pinned.Backend{pinned.CUDAHost, pinned.Auto} {
			if _, err := pinned.New(pinned.Options{Backend: be, Capacity: 64 << 20, Devices: devs}); !errors.Is(err, pinned.ErrInvalidOptions) {
				t.Errorf("%s with Devices %v = %v, want ErrInvalidOptions", be, devs, err)
			}
		}
	}
	if live := f.LiveObjects(); len(live) != 0 {
		t.Errorf("refused pools left %v", live)
	}
}

// TestFakePrecommitSignals: the ready channel closes, the callback runs once with the bytes and
// no error, Usage shows the progress; a driver refusing memory midway stops the precommit with
// an error every signal reports, and what it pinned stays counted.
func TestFakePrecommitSignals(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	var calls atomic.Int32
	var got atomic.Uint64
	f.SetPinCost(false, 2*time.Millisecond, 0)
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, Precommit: 128 << 20, CommitWorkers: 4,
		OnPrecommit: func(n uint64, err error) {
			calls.Add(1)
			if err == nil {
				got.Store(n)
			}
		}})
	seen := false
	for !seen {
		select {
		case <-p.PrecommitDone():
			seen = true
		default:
			if u := p.Usage(); u.Precommitted > 0 && u.Precommitted < 128<<20 {
				t.Logf("under way: %d MiB precommitted", u.Precommitted>>20)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	f.SetPinCost(false, 0, 0)
	if err := p.WaitPrecommit(); err != nil || calls.Load() != 1 || got.Load() != 128<<20 || p.Usage().Precommitted != 128<<20 {
		t.Errorf("precommit over: err %v, callback called %d times with %d bytes, usage %+v", err, calls.Load(), got.Load(), p.Usage())
	}
	if st := p.Stats(); st.CommitWorkers != 4 || st.Node != 0 || len(st.PerRegion) != 1 || st.PerRegion[0].Node != 0 {
		t.Errorf("stats: %d workers, node %d, regions %+v", st.CommitWorkers, st.Node, st.PerRegion)
	}
	closePool(t, f, p)

	f.FailAfter(fakecuda.CallCreate, 20, fakecuda.ResultOutOfMemory)
	var stopErr atomic.Value
	p = newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, Precommit: 128 << 20,
		OnPrecommit: func(n uint64, err error) { stopErr.Store(err) }})
	<-p.PrecommitDone()
	err := p.WaitPrecommit()
	if !errors.Is(err, pinned.ErrOutOfMemory) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("precommit refused midway: %v", err)
	}
	if e, _ := stopErr.Load().(error); e != err {
		t.Errorf("callback error %v, WaitPrecommit %v", e, err)
	}
	st := p.Stats()
	if st.PrecommitErr == nil || st.Precommitting || st.Precommitted == 0 || st.Precommitted >= 128<<20 ||
		st.Committed != st.Precommitted || uint64(f.Stat(fakecuda.HostVMMBytes)) != st.Committed {
		t.Errorf("after the refusal: %+v (fake holds %d)", st, f.Stat(fakecuda.HostVMMBytes))
	}
	if f.StickyError() != 0 {
		t.Errorf("sticky error %d", f.StickyError())
	}
	b, err := p.Alloc(1 << 20) // the pool works on
	must(t, "Alloc after the refusal", err)
	must(t, "Free", p.Free(b))
	closePool(t, f, p)
	if _, err := pinned.New(pinned.Options{Capacity: 64 << 20, Precommit: 128 << 20}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("Precommit above the capacity = %v", err)
	}
	q, err := pinned.New(pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	must(t, "New", err)
	select {
	case <-q.PrecommitDone():
	default:
		t.Error("PrecommitDone of a pool without a precommit is not closed")
	}
	must(t, "Close", q.Close())
}

// TestFakeNodes: four GPUs on two nodes get two pools, each with its memory on its node and
// granted to all four GPUs; Free finds the pool.
func TestFakeNodes(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(4)
	f.SetNUMANodes(2) // device d is nearest node d % 2
	n, err := pinned.NewNodes(pinned.Options{Backend: pinned.CUDAHost, Capacity: 256 << 20, Devices: []int{1, 2, 3}})
	must(t, "NewNodes", err)
	pools, nodes := n.Pools()
	if len(pools) != 2 || nodes[0] != 0 || nodes[1] != 1 {
		t.Fatalf("%d pools on nodes %v, want 2 on [0 1]", len(pools), nodes)
	}
	for dev := range 4 {
		p, err := n.For(dev)
		must(t, "For", err)
		q, err := n.On(dev % 2)
		must(t, "On", err)
		if p != q || p.Stats().Node != dev%2 {
			t.Errorf("device %d: pool on node %d", dev, p.Stats().Node)
		}
	}
	var bufs [][]byte
	for dev := range 4 {
		b, err := n.AllocFor(dev, 4<<20)
		must(t, "AllocFor", err)
		bufs = append(bufs, b)
	}
	if f.NodeBytes(0) != 8<<20 || f.NodeBytes(1) != 8<<20 {
		t.Errorf("node 0 holds %d, node 1 %d; want 8 MiB each", f.NodeBytes(0), f.NodeBytes(1))
	}
	for _, b := range bufs {
		for dev := range 4 {
			if err := copyOn(t, f, dev, b); err != nil {
				t.Errorf("device %d copying a buffer of node %d: %v", dev, 0, err)
			}
		}
	}
	b, err := n.AllocOn(1, 1<<20)
	must(t, "AllocOn", err)
	bufs = append(bufs, b)
	if _, err := n.AllocOn(5, 1<<20); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("AllocOn(5) = %v", err)
	}
	if _, err := n.For(7); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("For(7) = %v", err)
	}
	if err := n.Free(make([]byte, 64)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("Free of Go memory = %v", err)
	}
	for _, b := range bufs {
		must(t, "Free", n.Free(b))
	}
	must(t, "Close", n.Close())
	if live := f.LiveObjects(); len(live) != 0 {
		t.Errorf("after Close: %v", live)
	}
	if _, err := pinned.NewNodes(pinned.Options{Backend: pinned.Locked}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("NewNodes(Locked) = %v", err)
	}
	if _, err := pinned.NewNodes(pinned.Options{Backend: pinned.CUDAHost, NUMA: arena.NUMANode(0)}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("NewNodes with a node = %v", err)
	}
}

// TestNodesWithoutDriver: Auto without a driver gives one locked pool for every device.
func TestNodesWithoutDriver(t *testing.T) {
	if !fakecuda.RunWithoutDriver(t) {
		return
	}
	n, err := pinned.NewNodes(pinned.Options{Backend: pinned.Auto, Capacity: 64 << 20, Devices: []int{1}})
	must(t, "NewNodes", err)
	p0, _ := n.For(0)
	p1, _ := n.For(1)
	if p0 == nil || p0 != p1 || p0.Stats().Backend != pinned.Locked {
		t.Errorf("pools %p %p", p0, p1)
	}
	b, err := n.AllocFor(1, 4096)
	must(t, "AllocFor", err)
	must(t, "Free", n.Free(b))
	must(t, "Close", n.Close())
}
