package uvm

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
// they need no copy) and then calls Evicted for those it took.
type Policy interface {
	Used(id BlockID)
	Pinned(id BlockID)
	Evicted(id BlockID)
	Freed(id BlockID)
	Walk(yield func(BlockID) bool)
	// Name names the policy in Stats.
	Name() string
}

// list is an intrusive doubly linked list of block ids, with its links in slices indexed by
// id, so that it makes no allocation once the slices have grown to the tier's block count.
// A list shares the link slices of its links value with the other lists of one policy: a
// block is in at most one of them.
type list struct {
	l          *links
	head, tail int32 // -1 when empty; head is the coldest end
	n          int
	tag        uint8 // which list of the policy; links.in records it
}

// links holds the prev/next links and list membership of every block id.
type links struct {
	prev, next []int32
	in         []uint8 // 0: in no list; otherwise the tag of the list
}

func (l *links) grow(id BlockID) {
	for int(id) >= len(l.prev) {
		l.prev = append(l.prev, -1)
		l.next = append(l.next, -1)
		l.in = append(l.in, 0)
	}
}

func newList(l *links, tag uint8) list { return list{l: l, head: -1, tail: -1, tag: tag} }

// has reports whether id is in this list.
func (q *list) has(id BlockID) bool { return int(id) < len(q.l.in) && q.l.in[id] == q.tag }

// pushBack appends id at the hot end. id must be in no list.
func (q *list) pushBack(id BlockID) {
	q.l.grow(id)
	i := int32(id)
	q.l.prev[i], q.l.next[i] = q.tail, -1
	if q.tail >= 0 {
		q.l.next[q.tail] = i
	} else {
		q.head = i
	}
	q.tail = i
	q.l.in[i] = q.tag
	q.n++
}

// remove takes id out of this list; it must be in it.
func (q *list) remove(id BlockID) {
	i := int32(id)
	p, n := q.l.prev[i], q.l.next[i]
	if p >= 0 {
		q.l.next[p] = n
	} else {
		q.head = n
	}
	if n >= 0 {
		q.l.prev[n] = p
	} else {
		q.tail = p
	}
	q.l.prev[i], q.l.next[i], q.l.in[i] = -1, -1, 0
	q.n--
}

// popFront removes and returns the coldest id.
func (q *list) popFront() (BlockID, bool) {
	if q.head < 0 {
		return 0, false
	}
	id := BlockID(q.head)
	q.remove(id)
	return id, true
}

// walk visits the list from the coldest end; it reports whether yield asked to go on.
func (q *list) walk(yield func(BlockID) bool) bool {
	for i := q.head; i >= 0; {
		next := q.l.next[i] // yield must not change the list; read ahead anyway
		if !yield(BlockID(i)) {
			return false
		}
		i = next
	}
	return true
}

// LRU returns the default policy: least recently used first, where a block's last use is its
// last Release (or the restore of a Prefetch). It keeps no history of evicted blocks.
func LRU() Policy {
	p := &lru{}
	p.q = newList(&p.l, 1)
	return p
}

type lru struct {
	l links
	q list
}

func (p *lru) Name() string { return "lru" }

func (p *lru) Used(id BlockID) {
	if p.q.has(id) {
		p.q.remove(id)
	}
	p.q.pushBack(id)
}

func (p *lru) Pinned(id BlockID)  { p.drop(id) }
func (p *lru) Evicted(id BlockID) { p.drop(id) }
func (p *lru) Freed(id BlockID)   { p.drop(id) }

func (p *lru) drop(id BlockID) {
	if p.q.has(id) {
		p.q.remove(id)
	}
}

func (p *lru) Walk(yield func(BlockID) bool) { p.q.walk(yield) }
