package uvm

// Eviction policies: the Policy interface, which orders the evictable blocks for the tier, and
// LRU, the default. TwoQ is in twoq.go; both are built of the intrusive list of list.go.

// BlockID names a block slot of a tier for its Policy: a small integer, reused after the block
// is freed (Policy.Freed says so), so a policy can index slices by it.
type BlockID uint32

// Policy orders the blocks a tier may evict. The tier calls it with its lock held, so an
// implementation needs no lock of its own; its methods must not call the tier. A block is
// evictable while it is on the device and not acquired; the tier reports each change:
//
//   - Used: the block became evictable after a use (its last Release, or a restore for
//     Prefetch). It is the policy's record of an access.
//   - Pinned: an evictable block was acquired; a Used follows its last Release.
//   - Evicted: an evictable block left the device. A policy may remember it (a ghost entry);
//     a later Used of it is a re-reference.
//   - Freed: the block is gone; its BlockID will name a new block later.
//
// Walk visits the evictable blocks in eviction order, coldest first, until yield returns
// false. The tier looks at a bounded number of blocks per eviction (clean ones first, since
// they need no copy) and then calls Evicted for those it took. A block Walk yields that is not
// evictable (acquired, off the device, freed, or no block of the tier's) is passed over and
// counted in Stats.PolicyErrors: a policy's mistake costs its order, never an acquired block's
// bytes.
type Policy interface {
	Used(id BlockID)
	Pinned(id BlockID)
	Evicted(id BlockID)
	Freed(id BlockID)
	Walk(yield func(BlockID) bool)
	// Name names the policy in Stats.
	Name() string
}

// LRU returns the default policy: least recently used first, where a block's last use is its
// last Release (or the restore of a Prefetch). It keeps no history of evicted blocks.
func LRU() Policy {
	return &lru{}
}

type lru struct {
	ns nodes
	q  list
}

func (p *lru) Name() string { return "lru" }

func (p *lru) Used(id BlockID) {
	n := p.ns.at(id)
	p.q.drop(n)
	p.q.pushBack(n)
}

func (p *lru) Pinned(id BlockID)  { p.drop(id) }
func (p *lru) Evicted(id BlockID) { p.drop(id) }
func (p *lru) Freed(id BlockID)   { p.drop(id) }

func (p *lru) drop(id BlockID) { p.q.drop(p.ns.at(id)) }

func (p *lru) Walk(yield func(BlockID) bool) { p.q.walk(yield) }
