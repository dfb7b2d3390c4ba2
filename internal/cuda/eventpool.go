package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// EventPool reuses events created with timing disabled, so that marking a point in a stream
// costs a record, not a create and a destroy. It is safe for concurrent use.
type EventPool struct {
	d         *Device
	mu        sync.Mutex
	idle      []Event
	refused   []Event // events whose destroy the driver refused: the next Close tries again
	closed    bool
	created   atomic.Int64
	destroyed atomic.Int64
}

// NewEventPool returns an empty pool of events on d.
func NewEventPool(d *Device) *EventPool { return &EventPool{d: d} }

// Get returns an idle event, or creates one (timing disabled) if none is idle.
func (p *EventPool) Get() (Event, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 && !p.closed {
		ev := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return ev, nil
	}
	p.mu.Unlock()
	ev, err := p.d.EventCreate(true)
	if err != nil {
		return 0, err
	}
	p.created.Add(1)
	return ev, nil
}

// Put returns an event from Get to the pool. The event may still be pending: recording it
// again later is allowed. After Close, Put destroys the event; one whose destroy the driver
// refuses stays in the pool, for the next Close to destroy. An event a capture may have taken
// (EventTainted) is neither kept nor destroyed now: it is let go, and destroyed once that
// capture has ended (capturetaint.go).
func (p *EventPool) Put(ev Event) {
	if untaint(ev) {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, ev)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if p.d.EventDestroy(ev) != nil {
		p.keep([]Event{ev})
		return
	}
	p.destroyed.Add(1)
}

// Close destroys the idle events, and those whose destroy the driver refused before, and makes
// later Puts destroy theirs. It tries every event; one whose destroy the driver refuses (for a
// bad handle, or every one under the context's sticky error after a device fault) stays in the
// pool, and a later Close tries it again, so that each event is destroyed once. Its error says
// each different refusal once, with the number of events kept.
func (p *EventPool) Close() error {
	p.mu.Lock()
	evs := append(p.idle, p.refused...)
	p.idle, p.refused = nil, nil
	p.closed = true
	p.mu.Unlock()
	var errs []error
	kept := evs[:0]
	for _, ev := range evs {
		if err := p.d.EventDestroy(ev); err != nil {
			errs = append(errs, err)
			kept = append(kept, ev)
			continue
		}
		p.destroyed.Add(1)
	}
	if len(kept) == 0 {
		return nil
	}
	p.keep(kept)
	err := errkind.Once(errs...)
	return fmt.Errorf("%w; the pool keeps %s the driver refused to destroy, for a later Close",
		err, plural(len(kept), "event"))
}

// keep adds evs, events whose destroy the driver refused, to those the next Close destroys.
func (p *EventPool) keep(evs []Event) {
	p.mu.Lock()
	p.refused = append(p.refused, evs...)
	p.mu.Unlock()
}

// Created returns the number of events the pool has created.
func (p *EventPool) Created() int64 { return p.created.Load() }

// Destroyed returns the number of events the pool has destroyed.
func (p *EventPool) Destroyed() int64 { return p.destroyed.Load() }

// Idle returns the number of events waiting in the pool.
func (p *EventPool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
