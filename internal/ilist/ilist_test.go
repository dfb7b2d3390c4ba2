package ilist

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// item is an element that may be on two lists at once, through a and b.
type item struct {
	id   int
	a, b Links[item]
}

// ids returns the ids of l's elements front to back, walking the links both ways and checking
// that the two walks, Len, Front and Back agree.
func ids(t *testing.T, l *List[item], which func(*item) *Links[item]) []int {
	t.Helper()
	var fwd []int
	for e := l.Front(); e != nil; e = which(e).Next() {
		if !l.Contains(which(e)) || !which(e).Linked() {
			t.Fatalf("item %d reached on the list does not say it is on it", e.id)
		}
		fwd = append(fwd, e.id)
		if len(fwd) > l.Len() {
			t.Fatalf("walk longer than Len %d: a cycle", l.Len())
		}
	}
	var back []int
	for e := l.Back(); e != nil; e = which(e).Prev() {
		back = append(back, e.id)
		if len(back) > l.Len() {
			t.Fatalf("backward walk longer than Len %d: a cycle", l.Len())
		}
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, back) || len(fwd) != l.Len() {
		t.Fatalf("forward %v, backward %v, Len %d", fwd, back, l.Len())
	}
	var all []int
	for e := range l.All() {
		all = append(all, e.id)
	}
	if !slices.Equal(all, fwd) {
		t.Fatalf("All yields %v, the links %v", all, fwd)
	}
	return fwd
}

func linksA(e *item) *Links[item] { return &e.a }
func linksB(e *item) *Links[item] { return &e.b }

func TestEmpty(t *testing.T) {
	var l List[item]
	if l.Front() != nil || l.Back() != nil || l.Len() != 0 || l.PopFront() != nil {
		t.Fatal("the zero List is not empty")
	}
	var e item
	if e.a.Linked() || l.Contains(&e.a) || e.a.Next() != nil || e.a.Prev() != nil {
		t.Fatal("zero Links say they are linked")
	}
}

func TestPushRemove(t *testing.T) {
	var l List[item]
	e := make([]item, 4)
	for i := range e {
		e[i].id = i
	}
	l.PushBack(&e[1], &e[1].a)
	l.PushFront(&e[0], &e[0].a)
	l.PushBack(&e[2], &e[2].a)
	l.PushBack(&e[3], &e[3].a)
	if got := ids(t, &l, linksA); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("got %v", got)
	}
	l.Remove(&e[2].a) // middle
	l.Remove(&e[0].a) // front
	l.Remove(&e[3].a) // back
	if got := ids(t, &l, linksA); !slices.Equal(got, []int{1}) {
		t.Fatalf("got %v", got)
	}
	if e[0].a.Linked() || e[0].a.Next() != nil || e[2].a.Prev() != nil {
		t.Fatal("removed Links still linked")
	}
	if got := l.PopFront(); got != &e[1] || l.Len() != 0 || l.Front() != nil || l.Back() != nil {
		t.Fatalf("PopFront of the last element: %v, list %d long", got, l.Len())
	}
	// Removed elements go on again.
	l.PushFront(&e[2], &e[2].a)
	if got := ids(t, &l, linksA); !slices.Equal(got, []int{2}) {
		t.Fatalf("got %v", got)
	}
}

// TestTwoLists puts one element on two lists through its two Links.
func TestTwoLists(t *testing.T) {
	var la, lb List[item]
	e := []item{{id: 0}, {id: 1}}
	la.PushBack(&e[0], &e[0].a)
	la.PushBack(&e[1], &e[1].a)
	lb.PushBack(&e[1], &e[1].b)
	if la.Contains(&e[1].b) || lb.Contains(&e[1].a) || lb.Contains(&e[0].b) {
		t.Fatal("Contains confuses the lists")
	}
	la.Remove(&e[1].a)
	if got := ids(t, &la, linksA); !slices.Equal(got, []int{0}) {
		t.Fatalf("a: %v", got)
	}
	if got := ids(t, &lb, linksB); !slices.Equal(got, []int{1}) {
		t.Fatalf("b: %v", got)
	}
}

// TestAllRemovesCurrent removes each element from inside the range over All.
func TestAllRemovesCurrent(t *testing.T) {
	var l List[item]
	e := make([]item, 5)
	for i := range e {
		e[i].id = i
		l.PushBack(&e[i], &e[i].a)
	}
	var seen []int
	for x := range l.All() {
		seen = append(seen, x.id)
		if x.id%2 == 0 {
			l.Remove(&x.a)
		}
	}
	if !slices.Equal(seen, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("All yielded %v while removing", seen)
	}
	if got := ids(t, &l, linksA); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("left %v", got)
	}
	n := 0
	for range l.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatal("All went on after break")
	}
}

// TestMisusePanics checks that a double push and a remove from the wrong list panic rather than
// corrupt the lists.
func TestMisusePanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	var l, m List[item]
	var e, f item
	l.PushBack(&e, &e.a)
	mustPanic("PushBack of a linked element", func() { l.PushBack(&e, &e.a) })
	mustPanic("PushFront onto another list", func() { m.PushFront(&e, &e.a) })
	mustPanic("Remove from another list", func() { m.Remove(&e.a) })
	mustPanic("Remove of an unlinked element", func() { l.Remove(&f.a) })
	if got := ids(t, &l, linksA); !slices.Equal(got, []int{0}) || m.Len() != 0 {
		t.Fatalf("misuse changed the lists: %v, %d", got, m.Len())
	}
}

// TestModel runs long random sequences of every operation on three lists sharing a set of
// elements (each element on at most one list through a, and at most one through b), and checks
// each list against a slice model after every step.
func TestModel(t *testing.T) {
	const (
		nitems = 40
		nlists = 3
		steps  = 200000
	)
	r := rand.New(rand.NewPCG(28, 1))
	items := make([]item, nitems)
	for i := range items {
		items[i].id = i
	}
	var lists [2][nlists]List[item]
	var model [2][nlists][]int
	where := [2][]int{make([]int, nitems), make([]int, nitems)} // list index+1, 0 when on none
	which := [2]func(*item) *Links[item]{linksA, linksB}
	for step := range steps {
		s := r.IntN(2) // through a or b
		li := r.IntN(nlists)
		l, m := &lists[s][li], &model[s][li]
		i := r.IntN(nitems)
		e := &items[i]
		lk := which[s](e)
		switch op := r.IntN(6); {
		case op < 2 && where[s][i] == 0:
			if op == 0 {
				l.PushFront(e, lk)
				*m = slices.Insert(*m, 0, i)
			} else {
				l.PushBack(e, lk)
				*m = append(*m, i)
			}
			where[s][i] = li + 1
		case op < 4 && where[s][i] != 0:
			home := where[s][i] - 1
			lists[s][home].Remove(lk)
			hm := &model[s][home]
			*hm = slices.Delete(*hm, slices.Index(*hm, i), slices.Index(*hm, i)+1)
			where[s][i] = 0
		case op == 4:
			got := l.PopFront()
			if len(*m) == 0 {
				if got != nil {
					t.Fatalf("step %d: PopFront of an empty list gave %d", step, got.id)
				}
				break
			}
			if got == nil || got.id != (*m)[0] {
				t.Fatalf("step %d: PopFront gave %v, want %d", step, got, (*m)[0])
			}
			where[s][(*m)[0]] = 0
			*m = (*m)[1:]
		default:
			if got := l.Contains(lk); got != (where[s][i] == li+1) {
				t.Fatalf("step %d: Contains says %v, the model %v", step, got, where[s][i] == li+1)
			}
		}
		if got := ids(t, l, which[s]); !slices.Equal(got, *m) && !(len(got) == 0 && len(*m) == 0) {
			t.Fatalf("step %d: list %v, model %v", step, got, *m)
		}
	}
	for s := range 2 {
		for li := range nlists {
			if got := ids(t, &lists[s][li], which[s]); !slices.Equal(got, model[s][li]) && len(got)+len(model[s][li]) > 0 {
				t.Fatalf("end: list %d/%d is %v, model %v", s, li, got, model[s][li])
			}
		}
	}
}

// TestNoAllocation checks that pushes and removes allocate nothing.
func TestNoAllocation(t *testing.T) {
	var l List[item]
	e := make([]item, 8)
	n := testing.AllocsPerRun(100, func() {
		for i := range e {
			l.PushBack(&e[i], &e[i].a)
		}
		for i := range e {
			if i%2 == 0 {
				l.Remove(&e[i].a)
			}
		}
		for l.PopFront() != nil {
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
