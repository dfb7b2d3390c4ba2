package uvm

import (
	"runtime"
	"testing"
	"weak"

	"github.com/pinmalloc/pinmalloc/device"
)

// TestDroppedPeersCollected: the registry of the tiers sharing a device heap (peers.go) holds
// neither the tiers nor the heap: a tier dropped without Close, and a heap dropped with its
// tiers, can be collected, and the registry keeps no entry for them. Before, the registry was a
// process-global map of the heaps to their tiers, which held every tier never closed, and its
// heap, for good (and asked those tiers for VRAM).
func TestDroppedPeersCollected(t *testing.T) {
	h := new(device.Heap) // a key only: nothing calls it
	keep := peerOf(h)
	defer keep.leavePeers()
	dropped := weak.Make(peerOf(h))
	gone := weak.Make(new(device.Heap))
	lone := weak.Make(peerOf(gone.Value()))
	runtime.GC()
	if dropped.Value() != nil || lone.Value() != nil || gone.Value() != nil {
		t.Fatalf("after a collection: collected a tier dropped without Close %t, "+
			"a dropped heap's tier %t, the heap %t; want all",
			dropped.Value() == nil, lone.Value() == nil, gone.Value() == nil)
	}
	next := peerOf(h) // a join prunes what was collected
	defer next.leavePeers()
	peers.mu.Lock()
	defer peers.mu.Unlock()
	for k, ts := range peers.m {
		for _, p := range ts {
			if k.Value() == nil || p.Value() == nil {
				t.Fatalf("the registry after a collection and a join keeps a collected heap (%t) or tier (%t)",
					k.Value() == nil, p.Value() == nil)
			}
		}
	}
	if ts := peers.m[weak.Make(h)]; len(ts) != 2 {
		t.Errorf("the registry after a collection and a join: %d tiers of the live heap, want 2", len(ts))
	}
}

// peerOf returns a tier of the heap h (not opened: a key for the registry), joined to its peers.
func peerOf(h *device.Heap) *Tier {
	t := &Tier{mem: stores{heap: h}}
	t.joinPeers()
	return t
}
