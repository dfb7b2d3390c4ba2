package cuda

import (
	"fmt"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// StreamFlags are the flags of StreamCreate (CU_STREAM_*).
type StreamFlags uint32

const (
	// StreamDefault makes a stream that synchronizes with the legacy default stream (0).
	StreamDefault StreamFlags = 0
	// StreamNonBlocking makes a stream whose work may run concurrently with work on the legacy
	// default stream, and does not wait for it.
	StreamNonBlocking StreamFlags = 0x1
)

// StreamCreate creates a stream in the device's primary context. Destroy it with
// StreamDestroy. Flags other than StreamNonBlocking give an error matching ErrInvalidValue.
func (d *Device) StreamCreate(flags StreamFlags) (Stream, error) {
	in, err := d.in()
	if err != nil {
		return 0, err
	}
	if flags&^StreamNonBlocking != 0 {
		return 0, fmt.Errorf("%w: stream flags %#x", ErrInvalidValue, uint32(flags))
	}
	st, err := in.StreamCreate(flags&StreamNonBlocking != 0)
	return Stream(st), err
}

// StreamCreateWithPriority creates a stream with a scheduling priority from
// StreamPriorityRange (numerically lower is higher priority; a value outside the range is
// clamped by the driver). Work on a higher-priority stream is scheduled first. On current GPUs
// the least priority is also the default one, that of StreamCreate's streams (and the runtime's
// cudaStreamCreate): a stream given it yields to streams raised above it and shares its level
// with those. Give a stream that must win the greatest. Destroy it with StreamDestroy. Flags
// other than StreamNonBlocking give an error matching ErrInvalidValue.
func (d *Device) StreamCreateWithPriority(flags StreamFlags, priority int) (Stream, error) {
	in, err := d.in()
	if err != nil {
		return 0, err
	}
	if flags&^StreamNonBlocking != 0 {
		return 0, fmt.Errorf("%w: stream flags %#x", ErrInvalidValue, uint32(flags))
	}
	st, err := in.StreamCreateWithPriority(flags&StreamNonBlocking != 0, priority)
	return Stream(st), err
}

// StreamPriorityRange returns the device's stream priorities: least is the lowest and
// greatest the highest, numerically smaller (0 and -5 on an H100). StreamCreate's streams have
// the default priority, which is least on current GPUs.
func (d *Device) StreamPriorityRange() (least, greatest int, err error) {
	in, err := d.in()
	if err != nil {
		return 0, 0, err
	}
	return in.StreamPriorityRange()
}

// StreamWaitEvent makes the work queued on s after this call wait until ev has completed,
// without blocking the CPU: the way to order work on two streams (record ev on the first,
// wait for it on the second). An event never recorded is complete already: the call is then
// a no-op.
func (d *Device) StreamWaitEvent(s Stream, ev Event) error {
	return d.do(func(in *icuda.Device) error { return in.StreamWaitEvent(uintptr(s), uintptr(ev)) })
}

// StreamSynchronize waits until all work queued on s has completed. It runs in the RELAXED
// capture interaction mode, as the module's own queries and waits do: a capture another thread
// began in the GLOBAL mode neither refuses it nor is invalidated by it. No mode allows a
// synchronize of a capturing stream, or of the legacy default stream (0) while a blocking
// stream captures: the driver refuses it (ErrCapturing) and invalidates the capture.
func (d *Device) StreamSynchronize(s Stream) error {
	return d.do(func(in *icuda.Device) error { return in.StreamSynchronize(uintptr(s)) })
}

// StreamQuery returns nil when all work queued on s has completed, and an error matching
// ErrNotReady while some is pending. It runs in the RELAXED capture interaction mode, as
// StreamSynchronize does.
func (d *Device) StreamQuery(s Stream) error {
	return d.do(func(in *icuda.Device) error { return in.StreamQuery(uintptr(s)) })
}

// StreamDestroy destroys a stream from StreamCreate; work queued on it still completes. A heap
// that has seen the stream must forget it first (device.Heap.ForgetStream). A handle the driver
// does not know as a stream of this context gives an error matching ErrInvalidHandle; a stream
// whose destroy the driver refuses stays alive and usable, for a later StreamDestroy.
func (d *Device) StreamDestroy(s Stream) error {
	return d.do(func(in *icuda.Device) error { return in.StreamDestroy(uintptr(s)) })
}

// EventCreate creates an event for ordering work (timing disabled, the cheap kind). Destroy
// it with EventDestroy.
func (d *Device) EventCreate() (Event, error) {
	in, err := d.in()
	if err != nil {
		return 0, err
	}
	ev, err := in.EventCreate(true)
	return Event(ev), err
}

// EventRecord records ev on stream s: the event completes when the work queued on s before it
// has completed. An event may be recorded again; waits and queries see the latest record.
func (d *Device) EventRecord(ev Event, s Stream) error {
	return d.do(func(in *icuda.Device) error { return in.EventRecord(uintptr(ev), uintptr(s)) })
}

// EventQuery returns nil when ev has completed (or was never recorded), and an error matching
// ErrNotReady while the work before it is pending. It runs in the RELAXED capture interaction
// mode, as StreamSynchronize does.
func (d *Device) EventQuery(ev Event) error {
	return d.do(func(in *icuda.Device) error { return in.EventQuery(uintptr(ev)) })
}

// EventSynchronize waits until ev has completed. It runs in the RELAXED capture interaction
// mode, as StreamSynchronize does.
func (d *Device) EventSynchronize(ev Event) error {
	return d.do(func(in *icuda.Device) error { return in.EventSynchronize(uintptr(ev)) })
}

// EventDestroy destroys an event from EventCreate. An event the driver does not know gives an
// error matching ErrInvalidHandle; an event whose destroy the driver refuses stays alive, as it
// was, for a later EventDestroy.
func (d *Device) EventDestroy(ev Event) error {
	return d.do(func(in *icuda.Device) error { return in.EventDestroy(uintptr(ev)) })
}

// do calls f with the Device inside d, or returns the error of a nil or zero d.
func (d *Device) do(f func(*icuda.Device) error) error {
	in, err := d.in()
	if err != nil {
		return err
	}
	return f(in)
}
