package uvm

// An intrusive list of block ids, what the policies are made of (policy.go, twoq.go).

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
