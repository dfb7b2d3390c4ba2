package cuda

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Events a capture may have taken. EventRecordOutsideCapture asks whether the stream captures
// before its record and again after it; a capture that began between the two, on another thread,
// took the record. Such an event stands for no point of the stream: a query after the capture ends
// finds it complete (it was never recorded outside the capture). The library must never query it as
// a point nor record it for another: EventPool.Put keeps it out of the pool and lets it go. A
// record made with the default flags in a capture is no node of its graph (D:
// cuEventRecordWithFlags, CU_EVENT_RECORD_EXTERNAL "create[s] an event record node instead of the
// default behavior"): it marks the capture's own dependencies, for a wait of another stream joining
// the capture, and the capture names the event only while it goes on. So a let go event is
// destroyed once its capture has ended: when an ask of the Device that recorded it
// (StreamIsCapturing, EventRecordOutsideCapture) finds the stream it was recorded in not capturing,
// after the ask that tainted it (reapLetGo), or its StreamDestroy of that stream (a capture ends
// with its stream, whose handle the driver gives a new one). Its owner may destroy it before,
// knowing the capture ended (Device.EventDestroy, which takes it out of the tainted events, or
// DestroyLetGo). One whose stream no such ask names again stays let go until Close of its Device,
// which destroys it if its stream is found not capturing then and forgets it if not (closeTaints);
// the Close that finds the context destroyed after its release forgets the tainted events of the
// Devices closed on it, held or let go: they were destroyed with it (forgetDestroyedTaints).
// TaintedEvents counts every event ever tainted. The table is keyed by handle, which the driver
// gives a new event once the one that had it is gone (destroyed by this binding, by another, or
// with its context): EventCreate takes the handle it gets out of it.
var taints struct {
	n     atomic.Int32 // events in m: Put looks no further while none
	seq   atomic.Uint64
	mu    sync.Mutex
	m     map[Event]taintOrigin
	let   []letGo      // tainted events given back to pools: reapLetGo's and DestroyLetGo's
	lets  atomic.Int32 // len(let): EventDestroy and the asks look no further while n and lets are 0
	total atomic.Int64
}

// taintOrigin is where an event was tainted: the Device that recorded it (nil once closed), its
// driver and device (whose primary context holds the event), the stream, and taints.seq after
// the taint, which orders the taint against the asks of reapLetGo.
type taintOrigin struct {
	d   *Device
	drv *driver
	dev int32
	s   Stream
	seq uint64
}

// letGo is a tainted event given back to a pool, with where it was tainted.
type letGo struct {
	ev Event
	taintOrigin
}

// taint notes that a capture may have taken ev's record in s, made through d.
func taint(ev Event, d *Device, s Stream) {
	taints.mu.Lock()
	if taints.m == nil {
		taints.m = make(map[Event]taintOrigin)
	}
	if _, ok := taints.m[ev]; !ok {
		taints.n.Add(1)
		taints.total.Add(1)
	}
	taints.m[ev] = taintOrigin{d: d, drv: d.drv, dev: d.dev, s: s, seq: taints.seq.Add(1)}
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

// TaintedEvents returns the number of events a capture may have taken (EventTainted) since
// the process began, which no pool reuses; those let go since are destroyed once their capture
// has ended (reapLetGo).
func TaintedEvents() int64 { return taints.total.Load() }

// TaintedHeld returns the number of tainted events (EventTainted) not given back to an
// EventPool: events their owners still hold, which they must neither record nor take for points,
// less those destroyed with their context (forgetDestroyedTaints).
func TaintedHeld() int { return int(taints.n.Load()) }

// untaint takes ev out of the tainted events, reporting whether it was one.
func untaint(ev Event) bool {
	if taints.n.Load() == 0 {
		return false
	}
	taints.mu.Lock()
	o, ok := taints.m[ev]
	if ok {
		delete(taints.m, ev)
		taints.n.Add(-1)
		taints.let = append(taints.let, letGo{ev, o})
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
// (Device.EventDestroy; the handle is still ev's, no new event has it), or once the driver has
// given its handle to a new event (Device.EventCreate: the event that had it is gone, destroyed
// unseen with its context), and says where it was, with where it was tainted.
func dropTaint(ev Event) (int, taintOrigin) {
	if taints.n.Load() == 0 && taints.lets.Load() == 0 {
		return notTainted, taintOrigin{}
	}
	taints.mu.Lock()
	defer taints.mu.Unlock()
	if o, ok := taints.m[ev]; ok {
		delete(taints.m, ev)
		taints.n.Add(-1)
		return taintHeld, o
	}
	if i := slices.IndexFunc(taints.let, func(l letGo) bool { return l.ev == ev }); i >= 0 {
		o := taints.let[i].taintOrigin
		taints.let = slices.Delete(taints.let, i, i+1)
		taints.lets.Add(-1)
		return taintLet, o
	}
	return notTainted, taintOrigin{}
}

// restoreTaint puts ev back where dropTaint found it, after the driver refused its destroy.
func restoreTaint(ev Event, was int, o taintOrigin) {
	if was == notTainted {
		return
	}
	taints.mu.Lock()
	if was == taintHeld {
		taints.m[ev] = o
		taints.n.Add(1)
	} else {
		taints.let = append(taints.let, letGo{ev, o})
		taints.lets.Add(1)
	}
	taints.mu.Unlock()
}

// DestroyLetGo destroys the tainted events given back to pools (let go) that no ask has
// destroyed yet, for a program that knows the captures that took them have ended (a test, at
// its end), and returns the first refusal; an event whose destroy the driver refuses stays let
// go. Each is destroyed through the Device that recorded it, which counted it (Stats); through
// d those whose Device was closed since, counted by none.
func DestroyLetGo(d *Device) error {
	taints.mu.Lock()
	evs := taints.let
	taints.let = nil
	taints.lets.Store(0)
	taints.mu.Unlock()
	return d.destroyLetGo(evs)
}

// reapLetGo destroys the let-go events that d recorded in s and whose taint came before seq,
// the value of taints.seq before an ask of d's found s not capturing: the ask came after the
// one that tainted each, which found s capturing, so the capture that may have taken its
// record has ended since (a stream stays in its capture until the capture ends) and names the
// event no more. Refusals leave the events let go, for a later ask; no one waits on them.
func (d *Device) reapLetGo(s Stream, seq uint64) {
	taints.mu.Lock()
	evs := takeLetGo(func(l letGo) bool { return l.d == d && l.s == s && l.seq <= seq })
	taints.mu.Unlock()
	if reapTook != nil {
		reapTook()
	}
	_ = d.destroyLetGo(evs)
}

// takeLetGo takes the let-go events that match out of taints.let and returns them. Under
// taints.mu.
func takeLetGo(match func(letGo) bool) []letGo {
	var evs []letGo
	kept := taints.let[:0]
	for _, l := range taints.let {
		if match(l) {
			evs = append(evs, l)
		} else {
			kept = append(kept, l)
		}
	}
	clear(taints.let[len(kept):])
	taints.let = kept
	taints.lets.Store(int32(len(kept)))
	return evs
}

// reapTook, when set (by tests), runs in reapLetGo once it has taken the events it destroys.
var reapTook func()

// destroyLetGo destroys evs, let-go events taken out of taints.let, each through the Device
// that recorded it (EventDestroy, which counts it destroyed there), or through d, counted by
// none, one whose Device was closed (naming none), and puts those whose destroy the driver
// refuses back; it returns the first refusal. Those it could not destroy for their Device
// closed (by a Close since they were taken, which closeTaints did not find them for) it puts
// back naming no Device: only DestroyLetGo destroys them then.
func (d *Device) destroyLetGo(evs []letGo) error {
	var first error
	for _, l := range evs {
		var err error
		if l.d != nil {
			err = l.d.EventDestroy(l.ev)
		} else {
			err = d.Do(func() error { return d.drv.eventDestroy(l.ev) })
		}
		if err != nil {
			if l.d != nil && l.d.closed.Load() {
				l.d = nil
			}
			taints.mu.Lock()
			taints.let = append(taints.let, l)
			taints.lets.Add(1)
			taints.mu.Unlock()
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// letGoAfterAsk runs after an ask of d's that found s not capturing (free), or a StreamDestroy
// of s that succeeded, made with seq the value of taints.seq before it: it costs an atomic
// load while no tainted event is let go.
func (d *Device) letGoAfterAsk(s Stream, seq uint64, free bool) {
	if free && taints.lets.Load() != 0 {
		d.reapLetGo(s, seq)
	}
}

// closeTaints runs in Close once d's calls have ended, before the release of its retain, so
// that no tainted event names the closed Device: it destroys d's let-go events whose stream an
// ask finds not capturing (their capture has ended, as for reapLetGo), forgets the others,
// leaving them to the driver (the end of the context frees them; while another retain holds
// it, they stay, as events no one destroys), and takes d out of the origins of the tainted
// events still held (a let go one of those, from then on, only DestroyLetGo destroys).
func (d *Device) closeTaints() {
	if taints.n.Load() == 0 && taints.lets.Load() == 0 {
		return
	}
	taints.mu.Lock()
	evs := takeLetGo(func(l letGo) bool { return l.d == d })
	for ev, o := range taints.m {
		if o.d == d {
			o.d = nil
			taints.m[ev] = o
		}
	}
	taints.mu.Unlock()
	for _, l := range evs {
		if st, err := d.drv.streamIsCapturingIn(d.ctx, l.s); err == nil && st == CaptureNone {
			_ = d.track(&d.events, uint64(l.ev), -1, d.destroyClosing(l.ev))
		}
	}
}

// destroyClosing destroys ev in d's context, for Close once its calls have ended: the Device
// is closed to Do.
func (d *Device) destroyClosing(ev Event) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.doPush(d.ctx, d.tag()); err != nil {
		return err
	}
	defer func() {
		if perr := d.drv.doPop(); perr != nil && err == nil {
			err = perr
		}
	}()
	return d.drv.eventDestroy(ev)
}

// forgetDestroyedTaints runs in Close once its release is given back: when d's primary context
// is inactive then (cuDevicePrimaryCtxGetState), a release, d's or a later one, destroyed it and
// every event in it, so it forgets the tainted events of the Devices closed on it (closeTaints
// named none), held by their owners or let go: the driver may give their handles to new events,
// which DestroyLetGo must not destroy (EventCreate forgets a handle it gets; another binding's
// events this binding never sees). While the context is active, or the driver cannot say, they
// stay: a retain, anyone's, keeps the events alive (a context retained again after the
// destruction is a new one, its events new: those stay tainted until their handles come back).
func (d *Device) forgetDestroyedTaints() {
	if taints.n.Load() == 0 && taints.lets.Load() == 0 {
		return
	}
	if active, err := d.drv.primaryActive(d.dev); err != nil || active {
		return
	}
	gone := func(o taintOrigin) bool { return o.d == nil && o.drv == d.drv && o.dev == d.dev }
	taints.mu.Lock()
	for ev, o := range taints.m {
		if gone(o) {
			delete(taints.m, ev)
			taints.n.Add(-1)
		}
	}
	takeLetGo(func(l letGo) bool { return gone(l.taintOrigin) })
	taints.mu.Unlock()
}
