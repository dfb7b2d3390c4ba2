package pinned

import (
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// TestStreamStateConsistent: consistent accepts a stream state built as the pool builds it and
// finds each kind of damage verify guards against.
func TestStreamStateConsistent(t *testing.T) {
	build := func() *streamOrder {
		o := &streamOrder{lists: newLists(nil)}
		for i := range o.uses {
			o.uses[i].m = map[uintptr]use{}
		}
		a, b := o.list(0x10), o.list(0x20)
		o.queue(a, deferred{addr: 0x1000, n: 4096})
		o.queue(b, deferred{addr: 0x2000, n: 64 << 10})
		// a buffer used on both streams, freed
		o.shard(0x3000).m[0x3000] = use{one: 0x10, more: []cuda.Stream{0x20}, freed: true, left: 2}
		o.sharedWeight.Add(weigh(100))
		o.shared.Add(1)
		o.sharedBytes.Add(100)
		d := deferred{addr: 0x3000, n: 100, shared: true}
		o.queue(a, d)
		o.queue(b, d)
		o.shard(0x4000).m[0x4000] = use{one: 0x10} // live, recorded
		return o
	}
	if err := build().consistent(); err != nil {
		t.Fatalf("a sound state: %v", err)
	}
	for what, damage := range map[string]func(o *streamOrder){
		"weight":        func(o *streamOrder) { o.sharedWeight.Add(1) },
		"twice":         func(o *streamOrder) { o.queue(o.lists.Lookup(0x20), deferred{addr: 0x1000, n: 4096}) },
		"shared left":   func(o *streamOrder) { u := o.shard(0x3000).m[0x3000]; u.left = 1; o.shard(0x3000).m[0x3000] = u },
		"shared count":  func(o *streamOrder) { o.shared.Add(1) },
		"own with use":  func(o *streamOrder) { o.shard(0x1000).m[0x1000] = use{one: 0x10} },
		"live on lists": func(o *streamOrder) { o.queue(o.lists.Lookup(0x10), deferred{addr: 0x4000, n: 8, shared: true}) },
	} {
		o := build()
		damage(o)
		err := o.consistent()
		if err == nil || !strings.Contains(err.Error(), "invariant") {
			t.Errorf("%s: consistent says %v", what, err)
		}
	}
}
