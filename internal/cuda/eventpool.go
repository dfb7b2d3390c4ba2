package cuda

import (
	"errors"
	"sync"
	"sync/atomic"
)

// EventPool reuses events created with timing disabled, so that marking a point in a stream
// costs a record, not a create and a destroy. It is safe for concurrent use.
type EventPool struct {
	d         *Device
	mu        sync.Mutex
	idle      []Event
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
// again later is allowed. After Close, Put destroys the event.
func (p *EventPool) Put(ev Event) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, ev)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if p.d.EventDestroy(ev) == nil {
		p.destroyed.Add(1)
	}
}

// Close destroys the idle events and makes later Puts destroy theirs. It tries every event and
// returns the errors met, joined.
func (p *EventPool) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	var errs []error
	for _, ev := range idle {
		if err := p.d.EventDestroy(ev); err != nil {
			errs = append(errs, err)
			continue
		}
		p.destroyed.Add(1)
	}
	return errors.Join(errs...)
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
