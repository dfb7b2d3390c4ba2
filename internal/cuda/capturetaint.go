package cuda

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Events a capture may have taken. EventRecordOutsideCapture asks whether the stream captures
// before its record and again after it; a capture that began between the two, on another
// thread, took the record as a node of its graph. Such an event stands for no point of the
// stream: a query after the capture ends finds it complete (it was never recorded outside the
// graph), and each launch of the graph records it again. The library must never query it as a
// point nor record it for another: EventPool.Put keeps it out of the pool for good. Nor is it
// destroyed: the driver API does not say whether a graph may outlive the events its record
// nodes name, so the event is left to the process (TaintedEvents counts them), unless its
// owner, knowing the graphs that name it destroyed, destroys it (Device.EventDestroy, which
// takes it out of the tainted events, or DestroyLetGo).
var taints struct {
	n     atomic.Int32 // events in m: Put looks no further while none
	mu    sync.Mutex
	m     map[Event]struct{}
	let   []Event      // tainted events given back to pools: DestroyLetGo's
	lets  atomic.Int32 // len(let): EventDestroy looks no further while n and lets are 0
	total atomic.Int64
}

// taint notes that a capture may have taken ev's record.
func taint(ev Event) {
	taints.mu.Lock()
	if taints.m == nil {
		taints.m = make(map[Event]struct{})
	}
	if _, ok := taints.m[ev]; !ok {
		taints.m[ev] = struct{}{}
		taints.n.Add(1)
		taints.total.Add(1)
	}
	taints.mu.Unlock()
}

// EventTainted reports whether a capture may have taken a record of ev made by
// EventRecordOutsideCapture (which then answered that the stream captures) and ev has not gone
// back to an EventPool since (Put keeps it): its owner must not record it again nor take it for
// a point. It costs an atomic load while no event is tainted.
func EventTainted(ev Event) bool {
	if taints.n.Load() == 0 {
		return false
	}
	taints.mu.Lock()
	_, ok := taints.m[ev]
	taints.mu.Unlock()
	return ok
}

// TaintedEvents returns the number of events a capture may have taken (EventTainted), which
// no pool reuses or destroys.
func TaintedEvents() int64 { return taints.total.Load() }

// TaintedHeld returns the number of tainted events (EventTainted) not given back to an
// EventPool: events their owners still hold, which they must neither record nor take for points.
func TaintedHeld() int { return int(taints.n.Load()) }

// untaint takes ev out of the tainted events, reporting whether it was one.
func untaint(ev Event) bool {
	if taints.n.Load() == 0 {
		return false
	}
	taints.mu.Lock()
	_, ok := taints.m[ev]
	if ok {
		delete(taints.m, ev)
		taints.n.Add(-1)
		taints.let = append(taints.let, ev)
		taints.lets.Add(1)
	}
	taints.mu.Unlock()
	return ok
}

// Where dropTaint found an event: tainted and held, or let go.
const (
	notTainted = iota
	taintHeld
	taintLet
)

// dropTaint takes ev out of the tainted events, held or let go, before its destroy
// (Device.EventDestroy; the handle is still ev's, no new event has it), and says where it was.
func dropTaint(ev Event) int {
	if taints.n.Load() == 0 && taints.lets.Load() == 0 {
		return notTainted
	}
	taints.mu.Lock()
	defer taints.mu.Unlock()
	if _, ok := taints.m[ev]; ok {
		delete(taints.m, ev)
		taints.n.Add(-1)
		return taintHeld
	}
	if i := slices.Index(taints.let, ev); i >= 0 {
		taints.let = slices.Delete(taints.let, i, i+1)
		taints.lets.Add(-1)
		return taintLet
	}
	return notTainted
}

// restoreTaint puts ev back where dropTaint found it, after the driver refused its destroy.
func restoreTaint(ev Event, was int) {
	if was == notTainted {
		return
	}
	taints.mu.Lock()
	if was == taintHeld {
		taints.m[ev] = struct{}{}
		taints.n.Add(1)
	} else {
		taints.let = append(taints.let, ev)
		taints.lets.Add(1)
	}
	taints.mu.Unlock()
}

// DestroyLetGo destroys the tainted events given back to pools (let go for good), for a program
// that knows every graph that may name them is destroyed (a test, at its end), and returns the
// first refusal; an event whose destroy the driver refuses stays let go.
func DestroyLetGo(d *Device) error {
	taints.mu.Lock()
	evs := taints.let
	taints.let = nil
	taints.lets.Store(0)
	taints.mu.Unlock()
	var first error
	for _, ev := range evs {
		if err := d.EventDestroy(ev); err != nil {
			taints.mu.Lock()
			taints.let = append(taints.let, ev)
			taints.lets.Add(1)
			taints.mu.Unlock()
			if first == nil {
				first = err
			}
		}
	}
	return first
}
