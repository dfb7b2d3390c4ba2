package uvm

// The policies' queues of block ids (policy.go, twoq.go), made of internal/ilist's list.

import "github.com/pinmalloc/pinmalloc/internal/ilist"

// node is a block id's element of its policy's queues: on one of them at most.
type node struct {
	link ilist.Links[node]
	id   BlockID
	home uint8 // TwoQ: the queue the block belongs to, evictable or not (tagA1in, ...), or 0
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

// list is a queue of one policy's nodes, its front the coldest end. The lists of one policy
// share its nodes: a block is in at most one of them.
type list struct{ l ilist.List[node] }

// len returns the number of blocks in the list.
func (q *list) len() int { return q.l.Len() }

// has reports whether n is in this list.
func (q *list) has(n *node) bool { return q.l.Contains(&n.link) }

// pushBack appends n at the hot end. n must be in no list.
func (q *list) pushBack(n *node) { q.l.PushBack(n, &n.link) }

// remove takes n out of this list; it must be in it.
func (q *list) remove(n *node) { q.l.Remove(&n.link) }

// drop takes n out of this list if it is in it.
func (q *list) drop(n *node) {
	if q.has(n) {
		q.remove(n)
	}
}

// popFront removes and returns the coldest node, or nil when the list is empty.
func (q *list) popFront() *node { return q.l.PopFront() }

// walk visits the list from the coldest end; it reports whether yield asked to go on.
func (q *list) walk(yield func(BlockID) bool) bool {
	for n := range q.l.All() {
		if !yield(n.id) {
			return false
		}
	}
	return true
}
