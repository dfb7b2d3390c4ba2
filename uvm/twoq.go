package uvm

// 2Q, a scan-resistant Policy (see TwoQ).

// TwoQ returns a scan-resistant policy, 2Q (Johnson and Shasha, VLDB 1994), in the form that
// suits blocks that are pinned while used. A block used for the first time enters A1in, a FIFO;
// a block used again after it was evicted from A1in (its id is still in A1out, a FIFO of ghost
// ids) or used again while it sits in Am enters (or moves to the hot end of) Am, an LRU list.
// Uses of a block while it is in A1in do not promote it: they are the correlated references of
// one pass. Victims come from A1in while it holds more than a quarter of the evictable blocks,
// else from Am; A1out remembers up to half as many ids as there are evictable blocks (at least
// 64). So a scan of blocks each used once flows through A1in and never displaces the blocks of
// Am, which LRU would all evict.
func TwoQ() Policy { return &twoQ{} }

// The queue a block belongs to (node.home), whether or not it is evictable now.
const (
	tagA1in = 1 + iota
	tagAm
	tagA1out
)

type twoQ struct {
	ns       nodes
	a1in, am list // evictable blocks
	a1out    list // ghost ids, evicted from A1in
}

func (p *twoQ) Name() string { return "2q" }

func (p *twoQ) Used(id BlockID) {
	n := p.ns.at(id)
	switch n.home {
	case tagA1in:
		if p.a1in.has(n) {
			return // a correlated reference: it keeps its place in the FIFO
		}
		p.a1in.pushBack(n)
	case tagAm:
		p.am.drop(n)
		p.am.pushBack(n)
	case tagA1out:
		p.a1out.remove(n)
		n.home = tagAm
		p.am.pushBack(n)
	default:
		n.home = tagA1in
		p.a1in.pushBack(n)
	}
}

func (p *twoQ) Pinned(id BlockID) { p.pinned(p.ns.at(id)) }

// pinned takes n out of the evictable queues, if it is in one.
func (p *twoQ) pinned(n *node) {
	p.a1in.drop(n)
	p.am.drop(n)
}

func (p *twoQ) Evicted(id BlockID) {
	n := p.ns.at(id)
	p.pinned(n)
	if n.home != tagA1in {
		n.home = 0
		return
	}
	n.home = tagA1out
	p.a1out.pushBack(n)
	for limit := max(64, (p.a1in.len()+p.am.len())/2); p.a1out.len() > limit; {
		p.a1out.popFront().home = 0
	}
}

func (p *twoQ) Freed(id BlockID) {
	n := p.ns.at(id)
	p.pinned(n)
	p.a1out.drop(n)
	n.home = 0
}

func (p *twoQ) Walk(yield func(BlockID) bool) {
	if p.a1in.len() > (p.a1in.len()+p.am.len())/4 {
		if p.a1in.walk(yield) {
			p.am.walk(yield)
		}
		return
	}
	if p.am.walk(yield) {
		p.a1in.walk(yield)
	}
}
