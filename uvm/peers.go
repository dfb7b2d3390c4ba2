package uvm

import (
	"slices"
	"sync"
	"weak"

	"github.com/pinmalloc/pinmalloc/device"
)

// Peers: tiers given one device heap (Options.Heap) ask each other for VRAM. The heap's
// pressure hook is a chain (pressure.go): an allocation of any stream asks the tier installed
// last, which passes the call down when it cannot help. A tier's own restores answer their
// pressure themselves, so the hook did nothing for them: a tier under pressure was helped by
// the tiers above it in the chain (their Relieve evicted for it) but never by those below, and
// the tier installed last by none, however cold their blocks.
//
// Now a tier's own allocation that the heap refuses asks its peers, the other tiers of the
// heap, in the order they joined, until one gives VRAM back (evictForHeap, as Relieve does for
// another user). The asking tier holds its lock, and a peer that holds its own may be waiting
// for the asker's (its own restore, asking the asker through the hook): so a peer's lock is
// only tried (TryLock), never waited for. A peer busy at that moment is passed over, and the
// allocation goes on as before: the heap calls the hook again, and the tier evicts its own
// blocks. Lock order: Tier.mu → peers.mu; a peer's Tier.mu is tried after peers.mu is let go.
//
// The registry holds neither the heaps nor the tiers: weak pointers, so that a tier dropped
// without Close, or a heap dropped with its tiers, can be collected (a tier open on a live heap
// stays reachable through the heap's pressure hook all the same, until Close takes it off).
// A join prunes what was collected; askPeers skips it. Neither is on a hot path: New, Close,
// and an allocation the heap refused.

// peers are the tiers of each shared device heap, in the order they joined.
var peers struct {
	mu sync.Mutex
	m  map[weak.Pointer[device.Heap]][]weak.Pointer[Tier]
}

// joinPeers makes t a peer of the other tiers of its heap, when the heap was given, and
// forgets the heaps and tiers collected since. peers.mu is held.
func (t *Tier) joinPeers() {
	if t.mem.ownHeap {
		return
	}
	if peers.m == nil {
		peers.m = map[weak.Pointer[device.Heap]][]weak.Pointer[Tier]{}
	}
	for k, ts := range peers.m {
		ts = slices.DeleteFunc(ts, func(p weak.Pointer[Tier]) bool { return p.Value() == nil })
		if k.Value() == nil || len(ts) == 0 {
			delete(peers.m, k)
		} else {
			peers.m[k] = ts
		}
	}
	k := weak.Make(t.mem.heap)
	peers.m[k] = append(peers.m[k], weak.Make(t))
}

// leavePeers takes t off its heap's peers, and reports whether t was the last of them to join
// that is still there (or, with a heap of its own, none): no tier installed its pressure hook
// on the heap after t's (pressure.go). peers.mu is held.
func (t *Tier) leavePeers() (last bool) {
	k, me := weak.Make(t.mem.heap), weak.Make(t)
	last = true
	for _, p := range slices.Backward(peers.m[k]) {
		if p.Value() != nil { // a tier collected is no longer installed
			last = p == me
			break
		}
	}
	ts := slices.DeleteFunc(peers.m[k], func(p weak.Pointer[Tier]) bool { return p == me })
	if len(ts) > 0 {
		peers.m[k] = ts
	} else {
		delete(peers.m, k)
	}
	return last
}

// peerLink is the pressure hook link of the peer of t whose hook is f, or nil when f is none
// of theirs (another user's hook, or the link of a tier that left). peers.mu is held.
func (t *Tier) peerLink(f device.PressureFunc) *hookLink {
	if t.mem.ownHeap {
		return nil
	}
	for _, w := range peers.m[weak.Make(t.mem.heap)] {
		if p := w.Value(); p != nil && device.SamePressure(p.hook.link.fn, f) {
			return p.hook.link
		}
	}
	return nil
}

// askPeers asks the other tiers of t's heap, one after the other, to give VRAM back for an
// allocation of n bytes on t's own stream, and reports whether one did. t.mu is held.
func (t *Tier) askPeers(n int) bool {
	peers.mu.Lock()
	others := slices.Clone(peers.m[weak.Make(t.mem.heap)]) // the out-of-memory path: one allocation
	peers.mu.Unlock()
	for _, w := range others {
		if p := w.Value(); p != nil && p != t && p.relieveTry(n) {
			return true
		}
	}
	return false
}

// relieveTry is Relieve for a peer's allocation of n bytes, made only if t's lock is free.
func (t *Tier) relieveTry(n int) bool {
	if !t.mu.TryLock() {
		return false
	}
	defer t.unlock("a peer's pressure")
	return t.relieveLocked(n)
}
