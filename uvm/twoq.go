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
func TwoQ() Policy {
	p := &twoQ{}
	p.a1in = newList(&p.ns)
	p.am = newList(&p.ns)
	p.a1out = newList(&p.ns)
	return p
}

const (
	tagA1in = 1 + iota
	tagAm
	tagA1out
)

type twoQ struct {
	ns       nodes
	a1in, am list    // evictable blocks
	a1out    list    // ghost ids, evicted from A1in
	where    []uint8 // by id: the queue a block belongs to (tagA1in, tagAm, tagA1out or 0)
}

func (p *twoQ) Name() string { return "2q" }

// home returns the queue a block belongs to, whether or not it is evictable now.
func (p *twoQ) home(id BlockID) uint8 {
	if int(id) < len(p.where) {
		return p.where[id]
	}
	return 0
}

func (p *twoQ) setHome(id BlockID, tag uint8) {
	for int(id) >= len(p.where) {
		p.where = append(p.where, 0)
	}
	p.where[id] = tag
}

func (p *twoQ) Used(id BlockID) {
	switch p.home(id) {
	case tagA1in:
		if p.a1in.has(id) {
			return // a correlated reference: it keeps its place in the FIFO
		}
		p.a1in.pushBack(id)
	case tagAm:
		if p.am.has(id) {
			p.am.remove(id)
		}
		p.am.pushBack(id)
	case tagA1out:
		p.a1out.remove(id)
		p.setHome(id, tagAm)
		p.am.pushBack(id)
	default:
		p.setHome(id, tagA1in)
		p.a1in.pushBack(id)
	}
}

func (p *twoQ) Pinned(id BlockID) {
	switch {
	case p.a1in.has(id):
		p.a1in.remove(id)
	case p.am.has(id):
		p.am.remove(id)
	}
}

func (p *twoQ) Evicted(id BlockID) {
	home := p.home(id)
	p.Pinned(id)
	if home != tagA1in {
		p.setHome(id, 0)
		return
	}
	p.setHome(id, tagA1out)
	p.a1out.pushBack(id)
	for limit := max(64, (p.a1in.len()+p.am.len())/2); p.a1out.len() > limit; {
		old, _ := p.a1out.popFront()
		p.setHome(old, 0)
	}
}

func (p *twoQ) Freed(id BlockID) {
	p.Pinned(id)
	if p.a1out.has(id) {
		p.a1out.remove(id)
	}
	p.setHome(id, 0)
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
