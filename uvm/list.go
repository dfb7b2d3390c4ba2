package uvm

// The policies' queues of block ids (policy.go, twoq.go), made of internal/ilist's list.

import "github.com/pinmalloc/pinmalloc/internal/ilist"

// node is a block id's element of its policy's queues: on one of them at most.
type node struct {
	link ilist.Links[node]
	id   BlockID
}

// nodeChunk is how many nodes a policy allocates at a time.
const nodeChunk = 64

// nodes holds a policy's elements by block id, in chunks that never move (the queues point into
// them), so that a policy makes no allocation once it has grown to the tier's block count.
type nodes struct{ chunks []*[nodeChunk]node }

// at returns id's node, growing the table to hold it.
func (ns *nodes) at(id BlockID) *node {
	for int(id/nodeChunk) >= len(ns.chunks) {
		c := new([nodeChunk]node)
		first := BlockID(len(ns.chunks) * nodeChunk)
		for i := range c {
			c[i].id = first + BlockID(i)
		}
		ns.chunks = append(ns.chunks, c)
	}
	return &ns.chunks[id/nodeChunk][id%nodeChunk]
}

// list is a queue of block ids of one policy, its front the coldest end. The lists of one
// policy share its nodes: a block is in at most one of them.
type list struct {
	ns *nodes
	l  ilist.List[node]
}

func newList(ns *nodes) list { return list{ns: ns} }

// len returns the number of ids in the list.
func (q *list) len() int { return q.l.Len() }

// has reports whether id is in this list.
func (q *list) has(id BlockID) bool {
	return int(id/nodeChunk) < len(q.ns.chunks) && q.l.Contains(&q.ns.at(id).link)
}

// pushBack appends id at the hot end. id must be in no list.
func (q *list) pushBack(id BlockID) {
	n := q.ns.at(id)
	q.l.PushBack(n, &n.link)
}

// remove takes id out of this list; it must be in it.
func (q *list) remove(id BlockID) { q.l.Remove(&q.ns.at(id).link) }

// popFront removes and returns the coldest id.
func (q *list) popFront() (BlockID, bool) {
	n := q.l.PopFront()
	if n == nil {
		return 0, false
	}
	return n.id, true
}

// walk visits the list from the coldest end; it reports whether yield asked to go on.
func (q *list) walk(yield func(BlockID) bool) bool {
	for n := range q.l.All() {
		if !yield(n.id) {
			return false
		}
	}
	return true
}
