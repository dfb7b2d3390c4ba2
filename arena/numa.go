package arena

// # NUMA placement
//
// Pinned memory on the wrong host NUMA node costs every copy a trip over the socket link
// (loaders on the wrong node ran 30 % slower: pytorch#197868). So host memory can be bound to a
// node: the host providers bind a region with mbind before it is first touched (MPOL_BIND where
// it is faulted in at commit, by mlock or by a provider that pins it, so that a full node is a
// commit error and not a signal later; MPOL_PREFERRED for pageable memory). A provider that
// serves a GPU places its memory at the GPU's node (package cudamem finds it); Stats and
// snapshots name the node of every region (Placer).

// NUMA selects the host NUMA node of host memory.
type NUMA int

// NUMANearest, the zero NUMA, leaves placement to the kernel for the host providers (and takes
// the node nearest the device for the CUDA providers of package cudamem).
const NUMANearest NUMA = 0

// NUMANode selects node n.
func NUMANode(n int) NUMA { return NUMA(n + 1) }

// Node returns the node n selects and whether it selects one (false for NUMANearest).
func (n NUMA) Node() (int, bool) { return int(n) - 1, n != NUMANearest }

// NodeUnknown is the node reported for memory no node was chosen for.
const NodeUnknown = -1

// placement is what Stats and Snapshot report of a provider's node.
func placement(p Provider) int {
	if pl, ok := p.(Placer); ok {
		return pl.Node()
	}
	return NodeUnknown
}
