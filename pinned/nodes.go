package pinned

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// # Pools for GPUs on several NUMA nodes
//
// A host with GPUs on two sockets wants each GPU's staging buffers on its own socket. Nodes
// keeps one Pool per host NUMA node the GPUs sit on, each with its own arena, its memory at
// that node (VMM host memory created there, or registered memory bound there) and granted to
// every GPU of the set, so any GPU can still copy from any buffer; GPUs on one node share its
// pool. The caller picks: For(device) or AllocFor(device, n) by the GPU the buffer serves,
// On(node) or AllocOn(node, n) by node; Free finds the pool a buffer came from.
//
// Why pools per node and not one pool with AllocOn: a pool's speed is its per-P shards over
// one heap group over one arena, with Alloc and Free of the same P's shard needing no lock.
// One pool serving several nodes would need a shard set per node and a node choice on every
// Alloc and Free, costing the hot path of every user for what only multi-socket hosts need.
// Separate pools cost nothing on the hot path (For is a map lookup, done once per loader), keep
// each node's memory in one address range (so the node of a buffer is the node of its pool),
// and reuse everything a pool does (precommit, purge, stats) per node. Free through Nodes
// scans at most a handful of pools' region tables, without a lock.

// Nodes is a set of pinned pools, one per host NUMA node of a set of GPUs. It is safe for
// concurrent use.
type Nodes struct {
	pools []*Pool       // one per node, in the order of their first device
	nodes []int         // the node of each pool (arena.NodeUnknown: devices no source places)
	byDev map[int]*Pool // device ordinal → its node's pool
}

// NewNodes makes a pool per host NUMA node among the GPUs o.Device and o.Devices, with the
// CUDAHost backend (Auto falls back to one Locked pool, for every device, where there is no
// driver). Each pool is o with Device set to the first GPU on its node (whose nearest node it
// then uses), Devices to every other GPU of the set, and NUMA to the nearest node: o.NUMA must
// be NUMANearest. o.Capacity, o.Precommit and the other options apply to each pool. Devices
// whose node no source knows (cudamem.DeviceNode) share one pool, at the HOST location.
func NewNodes(o Options) (*Nodes, error) {
	if o.NUMA != arena.NUMANearest {
		return nil, fmt.Errorf("%w: Nodes places each pool at its GPUs' node: Options.NUMA must be NUMANearest", ErrInvalidOptions)
	}
	if o.Backend != CUDAHost && o.Backend != Auto {
		return nil, fmt.Errorf("%w: Nodes needs the %s or %s backend, not %s", ErrInvalidOptions, CUDAHost, Auto, o.Backend)
	}
	if o.Backend == Auto {
		// As New: a device listed in Devices that the driver lacks is refused, with no quiet
		// fallback (an absent Device falls back, as New's does).
		if n, err := cuda.Count(); err == nil {
			for _, d := range o.Devices {
				if d < 0 || d >= n {
					return nil, fmt.Errorf("%w: the set lists device %d; the driver has %d", ErrInvalidOptions, d, n)
				}
			}
		}
	}
	devs := append([]int{o.Device}, o.Devices...)
	slices.Sort(devs)
	devs = slices.Compact(devs)
	nodes, err := deviceNodes(devs)
	if err != nil {
		if o.Backend == Auto && (errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)) {
			lo := o
			lo.Backend, lo.Devices = Locked, nil
			p, err := New(lo)
			if err != nil {
				return nil, err
			}
			n := &Nodes{pools: []*Pool{p}, nodes: []int{arena.NodeUnknown}, byDev: map[int]*Pool{}}
			for _, d := range devs {
				n.byDev[d] = p
			}
			return n, nil
		}
		return nil, wrapError(err, ErrInvalidOptions)
	}
	n := &Nodes{byDev: map[int]*Pool{}}
	for i, d := range devs {
		if n.byDev[d] != nil {
			continue
		}
		po := o
		po.Backend, po.Device, po.Devices = CUDAHost, d, nil
		for _, e := range devs {
			if e != d {
				po.Devices = append(po.Devices, e)
			}
		}
		p, err := New(po)
		if err != nil {
			return nil, errors.Join(err, n.Close())
		}
		n.pools, n.nodes = append(n.pools, p), append(n.nodes, nodes[i])
		for j, e := range devs {
			if nodes[j] == nodes[i] {
				n.byDev[e] = p
			}
		}
	}
	return n, nil
}

// deviceNodes returns the host NUMA node of each device (arena.NodeUnknown where no source
// knows).
func deviceNodes(devs []int) ([]int, error) {
	nodes := make([]int, len(devs))
	for i, d := range devs {
		dev, err := cuda.Open(d)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", d, err)
		}
		n, _, ok := cudamem.DeviceNode(dev)
		if !ok {
			n = arena.NodeUnknown
		}
		nodes[i] = n
		if err := dev.Close(); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

// For returns the pool on the node of device (a GPU of the set).
func (n *Nodes) For(device int) (*Pool, error) {
	if p := n.byDev[device]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: device %d is not one of the set's GPUs", ErrInvalidOptions, device)
}

// On returns the pool on host NUMA node node (arena.NodeUnknown: the pool of GPUs no source
// places).
func (n *Nodes) On(node int) (*Pool, error) {
	if i := slices.Index(n.nodes, node); i >= 0 {
		return n.pools[i], nil
	}
	return nil, fmt.Errorf("%w: no GPU of the set is on NUMA node %d (nodes %v)", ErrInvalidOptions, node, n.nodes)
}

// AllocFor allocates size bytes from the pool on device's node.
func (n *Nodes) AllocFor(device, size int) ([]byte, error) {
	p, err := n.For(device)
	if err != nil {
		return nil, err
	}
	return p.Alloc(size)
}

// AllocOn allocates size bytes from the pool on node.
func (n *Nodes) AllocOn(node, size int) ([]byte, error) {
	p, err := n.On(node)
	if err != nil {
		return nil, err
	}
	return p.Alloc(size)
}

// Free gives a buffer back to the pool it came from (Pool.Free's rules apply).
func (n *Nodes) Free(b []byte) error {
	if cap(b) == 0 { // buf[:0] is a buffer, as Pool.Free takes it
		return errEmptySlice
	}
	addr := mem.Addr(b)
	for _, p := range n.pools {
		if _, ok := p.a.Lookup(addr); ok {
			return p.Free(b)
		}
	}
	for _, p := range n.pools {
		if !p.released.Load() {
			return fmt.Errorf("%w: %#x is in no pool of the set", ErrNotOwned, addr)
		}
	}
	return ErrClosed // as Pool.Free: the memory is gone, whatever b was
}

// Pools returns the pools and the node of each (arena.NodeUnknown for GPUs no source places).
func (n *Nodes) Pools() ([]*Pool, []int) {
	return slices.Clone(n.pools), slices.Clone(n.nodes)
}

// WaitPrecommit waits for every pool's background commit and returns their errors joined.
func (n *Nodes) WaitPrecommit() error {
	var errs []error
	for _, p := range n.pools {
		errs = append(errs, p.WaitPrecommit())
	}
	return errors.Join(errs...)
}

// Close closes every pool (see Pool.Close) and returns their errors joined.
func (n *Nodes) Close() error {
	var errs []error
	for _, p := range n.pools {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
