// Package ilist is an intrusive doubly linked list: an element embeds the Links of each list it
// may be on, so that pushing and removing make no allocation and removal is O(1) from the
// element alone. The heap's available pages and segments with room, and the uvm policies'
// queues, are made of it.
//
// An element is on at most one List through one Links at a time: Links records which list (and
// so Linked, and List.Contains, are one load). A push of linked Links, or a Remove from a list
// the Links are not on, panics: both are bugs of the caller that would otherwise corrupt two
// lists. There is no lock: each list's owner serializes its operations.
//
// The operations are plain field accesses, inlined at their call sites: a method call through
// the element type (a constraint such as interface{ *T; Links() *Links[T] }) would go through
// the generic dictionary, an indirect call on every step, which the heap's allocation path
// cannot afford. So the element is named twice at a push, as itself and as its Links
// (l.PushBack(pg, &pg.avail)), and Links keep a pointer back to it.
package ilist

import "iter"

// Links are the links of an element of type T on one List[T]; the zero value is on no list.
// Embed one per list an element may be on at once.
type Links[T any] struct {
	prev, next *Links[T]
	list       *List[T] // the list the element is on, nil when on none
	elem       *T       // the element, set at each push
}

// Linked reports whether the Links are on a list.
func (lk *Links[T]) Linked() bool { return lk.list != nil }

// Next returns the element after this one on its list, or nil at the back (or when not linked).
func (lk *Links[T]) Next() *T {
	if lk.next == nil {
		return nil
	}
	return lk.next.elem
}

// Prev returns the element before this one on its list, or nil at the front (or when not
// linked).
func (lk *Links[T]) Prev() *T {
	if lk.prev == nil {
		return nil
	}
	return lk.prev.elem
}

// List is an intrusive doubly linked list of elements of type T; the zero value is an empty
// list. A List must not be copied once an element is on it (the elements point at it).
type List[T any] struct {
	head, tail *Links[T]
	n          int
}

// Len returns the number of elements on the list.
func (l *List[T]) Len() int { return l.n }

// Front returns the first element, or nil when the list is empty.
func (l *List[T]) Front() *T {
	if l.head == nil {
		return nil
	}
	return l.head.elem
}

// Back returns the last element, or nil when the list is empty.
func (l *List[T]) Back() *T {
	if l.tail == nil {
		return nil
	}
	return l.tail.elem
}

// Contains reports whether lk is on this list.
func (l *List[T]) Contains(lk *Links[T]) bool { return lk.list == l }

// PushFront puts e, whose Links on this list are lk, at the front. lk must be on no list.
func (l *List[T]) PushFront(e *T, lk *Links[T]) {
	if lk.list != nil {
		panic("ilist: push of an element already on a list")
	}
	lk.list, lk.elem = l, e
	lk.prev, lk.next = nil, l.head
	if l.head != nil {
		l.head.prev = lk
	} else {
		l.tail = lk
	}
	l.head = lk
	l.n++
}

// PushBack puts e, whose Links on this list are lk, at the back. lk must be on no list.
func (l *List[T]) PushBack(e *T, lk *Links[T]) {
	if lk.list != nil {
		panic("ilist: push of an element already on a list")
	}
	lk.list, lk.elem = l, e
	lk.prev, lk.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = lk
	} else {
		l.head = lk
	}
	l.tail = lk
	l.n++
}

// Remove takes the element whose Links are lk off this list. lk must be on this list.
func (l *List[T]) Remove(lk *Links[T]) {
	if lk.list != l {
		panic("ilist: remove of an element not on the list")
	}
	if lk.prev != nil {
		lk.prev.next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	lk.prev, lk.next, lk.list, lk.elem = nil, nil, nil, nil
	l.n--
}

// PopFront removes and returns the first element, or returns nil when the list is empty.
func (l *List[T]) PopFront() *T {
	lk := l.head
	if lk == nil {
		return nil
	}
	e := lk.elem
	l.Remove(lk)
	return e
}

// All yields the elements from front to back. The body may remove the element it was given
// (the next one is read before it runs), but no other.
func (l *List[T]) All() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for lk := l.head; lk != nil; {
			next := lk.next
			if !yield(lk.elem) {
				return
			}
			lk = next
		}
	}
}
