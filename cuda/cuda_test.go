package cuda_test

// Tests of the public CUDA surface against the fake driver of internal/fakecuda (each runs in a
// child process that loads it), and without any driver.

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// open opens device ordinal through the public package and closes it at cleanup.
func open(t *testing.T, ordinal int) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(ordinal)
	must(t, "Open", err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestFakeDeviceInfo(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	f.SetMemory(1, 3<<30)
	n, err := cuda.Count()
	if err != nil || n != 2 {
		t.Fatalf("Count = %d, %v; want 2", n, err)
	}
	if v, err := cuda.DriverVersion(); err != nil || v != 13000 {
		t.Errorf("DriverVersion = %d, %v; want 13000", v, err)
	}
	d := open(t, 1)
	if d.Ordinal() != 1 || d.Location() != (cuda.Location{Type: cuda.LocationDevice, ID: 1}) {
		t.Errorf("Ordinal %d, Location %+v", d.Ordinal(), d.Location())
	}
	if name, err := d.Name(); err != nil || name != "Fake GPU 1" {
		t.Errorf("Name = %q, %v", name, err)
	}
	if s := fmt.Sprint(d); s != "cuda device 1 (Fake GPU 1)" {
		t.Errorf("fmt.Sprint(device) = %q; want it named (it printed &{{0x...}})", s)
	}
	if total, err := d.TotalMem(); err != nil || total != 3<<30 {
		t.Errorf("TotalMem = %d, %v; want 3 GiB", total, err)
	}
	free, total, err := d.MemInfo()
	if err != nil || total != 3<<30 || free != total {
		t.Errorf("MemInfo = %d free of %d, %v; want all of 3 GiB free", free, total, err)
	}
	if d.Context() == 0 {
		t.Error("Context is 0")
	}
	must(t, "Synchronize", d.Synchronize())
	if _, err := cuda.Open(2); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Open(2) of 2 devices = %v; want ErrNoDevice", err)
	}
	if _, err := cuda.Open(-1); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Open(-1) = %v; want ErrNoDevice", err)
	}
}

// TestFakeNoDevice: a driver that initializes and counts no device (the fake with no device, as
// some set-ups answer where most refuse cuInit) gives Count 0 and an error matching ErrNoDevice,
// as Count promises; it gave 0 and nil. Open fails the same way.
func TestFakeNoDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(0)
	if n, err := cuda.Count(); n != 0 || !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Count with no device = %d, %v; want 0, ErrNoDevice", n, err)
	}
	if _, err := cuda.Open(0); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("Open(0) with no device = %v; want ErrNoDevice", err)
	}
}

// TestFakeStreamsAndEvents orders work with the public streams and events: work held pending
// by the fake keeps the stream and an event behind it not ready until it completes.
func TestFakeStreamsAndEvents(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := open(t, 0)
	in, err := icuda.Of(d) // to queue work: the public package has no copies
	must(t, "Internal", err)
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	must(t, "StreamCreate", err)
	s2, err := d.StreamCreate(cuda.StreamDefault)
	must(t, "StreamCreate", err)
	if _, err := d.StreamCreate(0x4); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("StreamCreate(0x4) = %v; want ErrInvalidValue", err)
	}
	least, greatest, err := d.StreamPriorityRange()
	if err != nil || least != 0 || greatest != -5 {
		t.Errorf("StreamPriorityRange = %d, %d, %v; want 0, -5 (the fake's, an H100's)", least, greatest, err)
	}
	hi, err := d.StreamCreateWithPriority(cuda.StreamNonBlocking, greatest)
	must(t, "StreamCreateWithPriority", err)
	if _, err := d.StreamCreateWithPriority(0x2, greatest); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("StreamCreateWithPriority(0x2) = %v; want ErrInvalidValue", err)
	}
	must(t, "StreamQuery of the priority stream", d.StreamQuery(hi))
	must(t, "StreamDestroy of the priority stream", d.StreamDestroy(hi))
	ev, err := d.EventCreate()
	must(t, "EventCreate", err)
	if f.Stat(fakecuda.Streams) != 2 || f.Stat(fakecuda.Events) != 1 {
		t.Errorf("fake holds %d streams, %d events; want 2, 1", f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events))
	}

	p, err := in.MemAlloc(4096)
	must(t, "MemAlloc", err)
	f.Hold(true)
	must(t, "MemsetD8Async", in.MemsetD8Async(p, 1, 4096, uintptr(s)))
	must(t, "EventRecord", d.EventRecord(ev, s))
	if err := d.StreamQuery(s); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("StreamQuery with work pending = %v; want ErrNotReady", err)
	}
	if err := d.EventQuery(ev); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("EventQuery behind pending work = %v; want ErrNotReady", err)
	}
	must(t, "StreamQuery of an idle stream", d.StreamQuery(s2))
	must(t, "StreamWaitEvent", d.StreamWaitEvent(s2, ev)) // s2 now waits for the work on s
	if err := d.StreamQuery(s2); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("StreamQuery of a stream waiting for pending work = %v; want ErrNotReady", err)
	}
	f.CompleteStream(uintptr(s2))
	f.CompleteStream(uintptr(s))
	must(t, "EventQuery after completion", d.EventQuery(ev))
	must(t, "StreamQuery after completion", d.StreamQuery(s))

	must(t, "MemsetD8Async", in.MemsetD8Async(p, 2, 4096, uintptr(s)))
	must(t, "EventRecord", d.EventRecord(ev, s))
	must(t, "EventSynchronize", d.EventSynchronize(ev)) // the fake completes what it waits for
	must(t, "MemsetD8Async", in.MemsetD8Async(p, 3, 4096, uintptr(s)))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	if f.Pending() != 0 {
		t.Errorf("%d operations pending after the synchronizations", f.Pending())
	}
	f.Hold(false)
	must(t, "MemFree", in.MemFree(p))

	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "StreamDestroy", d.StreamDestroy(s2))
	err = d.StreamQuery(s)
	if !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("StreamQuery of a destroyed stream = %v; want ErrInvalidHandle", err)
	}
	if code, ok := cuda.ResultCode(err); !ok || code != 400 {
		t.Errorf("ResultCode(%v) = %d, %v; want 400 (CUDA_ERROR_INVALID_HANDLE)", err, code, ok)
	}
	if err := d.EventRecord(ev, 0); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("EventRecord of a destroyed event = %v; want ErrInvalidHandle", err)
	}
	if f.Stat(fakecuda.Streams) != 0 || f.Stat(fakecuda.Events) != 0 {
		t.Errorf("fake holds %d streams, %d events after the destroys", f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events))
	}
}

// TestFakeCloseAndDo checks Do, Close (idempotent, gives the retain back) and the calls after it.
func TestFakeCloseAndDo(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d, err := cuda.Open(0)
	must(t, "Open", err)
	ran := false
	must(t, "Do", d.Do(func() error { ran = true; return nil }))
	mine := errors.New("mine")
	if err := d.Do(func() error { return mine }); err != mine || !ran {
		t.Errorf("Do returned %v (ran %v); want f's own error", err, ran)
	}
	if err := d.Do(nil); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("Do(nil) = %v; want ErrInvalidValue", err)
	}
	if f.Stat(fakecuda.Retains) != 1 {
		t.Errorf("retains = %d, want 1", f.Stat(fakecuda.Retains))
	}
	must(t, "Close", d.Close())
	must(t, "Close again", d.Close())
	if s := d.String(); s != "cuda device 0 (closed)" {
		t.Errorf("String after Close = %q", s)
	}
	if f.Stat(fakecuda.Retains) != 0 {
		t.Errorf("retains after Close = %d, want 0", f.Stat(fakecuda.Retains))
	}
	if _, err := d.StreamCreate(cuda.StreamDefault); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("StreamCreate after Close = %v; want ErrClosed", err)
	}
	if err := d.Synchronize(); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Synchronize after Close = %v; want ErrClosed", err)
	}
	if err := d.Do(func() error { return nil }); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Do after Close = %v; want ErrClosed", err)
	}
}

// TestFakeEveryCallAfterClose: after Close, every method that answers an error answers one
// matching ErrClosed, as the Device's doc says, the driver's queries that need no context
// (Name, TotalMem) included: they answered as if the device were still open.
func TestFakeEveryCallAfterClose(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d, err := cuda.Open(0)
	must(t, "Open", err)
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	must(t, "StreamCreate", err)
	ev, err := d.EventCreate()
	must(t, "EventCreate", err)
	must(t, "Close", d.Close())
	// The last retain went with the Close: the driver destroyed the context, with the stream and
	// the event left in it.
	if n := f.ForgetReclaimed(); n != 2 {
		t.Errorf("the context's destruction freed %d objects, want the stream and the event", n)
	}
	_, err1 := d.Name()
	_, err2 := d.TotalMem()
	_, _, err3 := d.MemInfo()
	_, err4 := d.StreamCreate(cuda.StreamDefault)
	_, err5 := d.EventCreate()
	_, err6 := d.StreamCreateWithPriority(cuda.StreamDefault, 0)
	_, _, err7 := d.StreamPriorityRange()
	errs := []error{err1, err2, err3, err4, err5, err6, err7, d.StreamWaitEvent(s, ev), d.Synchronize(),
		d.Do(func() error { return nil }), d.StreamSynchronize(s), d.StreamQuery(s), d.EventRecord(ev, s),
		d.EventQuery(ev), d.EventSynchronize(ev), d.EventDestroy(ev), d.StreamDestroy(s)}
	names := []string{"Name", "TotalMem", "MemInfo", "StreamCreate", "EventCreate", "StreamCreateWithPriority",
		"StreamPriorityRange", "StreamWaitEvent", "Synchronize", "Do", "StreamSynchronize", "StreamQuery",
		"EventRecord", "EventQuery", "EventSynchronize", "EventDestroy", "StreamDestroy"}
	for i, err := range errs {
		if !errors.Is(err, cuda.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", names[i], err)
		}
	}
}

// TestFakeOneWrapper checks the link between the public Device and the binding: the device
// inside is the one Open made, a heap gives back the Device it was given, and a second wrapper
// of the same device shares it (closing it closes both).
func TestFakeOneWrapper(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := open(t, 0)
	in, err := icuda.Of(d)
	must(t, "Of", err)
	if in2, err := icuda.Of(d); err != nil || in2 != in {
		t.Errorf("Of gave %p, then %p (%v)", in, in2, err)
	}
	h, err := device.New(d, device.Options{Capacity: 4 << 20})
	must(t, "device.New", err)
	if h.Device() != d {
		t.Error("Heap.Device is not the device given to device.New")
	}
	must(t, "heap Close", h.Close())
	w := icuda.Wrap[*cuda.Device](in)
	if got, err := icuda.Of(w); err != nil || got != in || w.Ordinal() != d.Ordinal() {
		t.Errorf("a second wrapper holds %p (%v), ordinal %d; want %p, %d", got, err, w.Ordinal(), in, d.Ordinal())
	}
	must(t, "Close of the second wrapper", w.Close())
	if err := d.Synchronize(); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Synchronize after the other wrapper's Close = %v; want ErrClosed", err)
	}
	if _, err := icuda.Of(&cuda.Device{}); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("Of of a zero Device = %v; want ErrNoDriver", err)
	}
	if _, err := icuda.Of((*cuda.Device)(nil)); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("Of of a nil Device = %v; want ErrNoDriver", err)
	}
}

// TestFakeConcurrent makes, uses and destroys streams and events from several goroutines (run
// it with -race).
func TestFakeConcurrent(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := open(t, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := streamRound(d); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f.Stat(fakecuda.Streams) != 0 || f.Stat(fakecuda.Events) != 0 {
		t.Errorf("fake holds %d streams, %d events", f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events))
	}
}

func streamRound(d *cuda.Device) error {
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return err
	}
	ev, err := d.EventCreate()
	if err != nil {
		return errors.Join(err, d.StreamDestroy(s))
	}
	return errors.Join(d.EventRecord(ev, s), d.StreamWaitEvent(0, ev), d.EventSynchronize(ev), d.StreamQuery(s),
		d.EventDestroy(ev), d.StreamDestroy(s))
}

func TestWithoutDriver(t *testing.T) {
	if !fakecuda.RunWithoutDriver(t) {
		return
	}
	if n, err := cuda.Count(); n != 0 || !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("Count = %d, %v; want 0, ErrNoDriver", n, err)
	}
	if _, err := cuda.DriverVersion(); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("DriverVersion = %v; want ErrNoDriver", err)
	}
	d, err := cuda.Open(0)
	if d != nil || !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("Open = %v, %v; want nil, ErrNoDriver", d, err)
	}
}

// TestNilDevice checks that every method of a nil or zero Device reports an error matching
// ErrNoDriver (the usual cause: Open's error was ignored) instead of crashing.
func TestNilDevice(t *testing.T) {
	for _, d := range []*cuda.Device{nil, {}} {
		_, err1 := d.Name()
		_, err2 := d.TotalMem()
		_, _, err3 := d.MemInfo()
		_, err4 := d.StreamCreate(cuda.StreamDefault)
		_, err5 := d.EventCreate()
		_, err6 := d.StreamCreateWithPriority(cuda.StreamDefault, 0)
		_, _, err7 := d.StreamPriorityRange()
		errs := []error{err1, err2, err3, err4, err5, err6, err7, d.StreamWaitEvent(0, 1), d.Synchronize(), d.Close(), d.Do(func() error { return nil }),
			d.StreamSynchronize(0), d.StreamQuery(0), d.StreamDestroy(1), d.EventRecord(1, 0),
			d.EventQuery(1), d.EventSynchronize(1), d.EventDestroy(1)}
		for i, err := range errs {
			if !errors.Is(err, cuda.ErrNoDriver) {
				t.Errorf("%v: call %d = %v; want ErrNoDriver", d, i, err)
			}
		}
		if s := d.String(); s != "cuda device <none>" {
			t.Errorf("String of a nil or zero Device = %q", s)
		}
		if d.Ordinal() != -1 || d.Context() != 0 || d.Location() != (cuda.Location{Type: cuda.LocationDevice, ID: -1}) {
			t.Errorf("%v: Ordinal %d, Context %#x, Location %+v", d, d.Ordinal(), d.Context(), d.Location())
		}
	}
}

// TestHandlesPrint: the handles print as what they are with %v and %s, and as integers with
// the integer verbs, so a message that formats one with %#x or %d reads as before.
func TestHandlesPrint(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{fmt.Sprint(cuda.DevicePtr(0x7f3a00200000)), "0x7f3a00200000"},
		{fmt.Sprintf("%#x", cuda.DevicePtr(0x1000)), "0x1000"},
		{fmt.Sprintf("%d", cuda.DevicePtr(4096)), "4096"},
		{fmt.Sprintf("%#v", cuda.DevicePtr(0x1000)), "0x1000"},
		{fmt.Sprintf("[%8s]", cuda.DevicePtr(0x10)), "[    0x10]"},
		{fmt.Sprintf("%x", cuda.Stream(0xabc)), "abc"},
		{fmt.Sprint(cuda.Stream(0x55d1c3a0)), "stream 0x55d1c3a0"},
		{fmt.Sprint(cuda.Stream(0)), "stream 0 (legacy default)"},
		{fmt.Sprint(cuda.Stream(1)), "stream 1 (legacy)"},
		{fmt.Sprint(cuda.Stream(2)), "stream 2 (per-thread default)"},
		{fmt.Sprintf("%q", cuda.Stream(2)), `"stream 2 (per-thread default)"`},
		{fmt.Sprintf("%v", cuda.Event(0x10)), "event 0x10"},
		{fmt.Sprintf("%+v", struct{ S cuda.Stream }{7}), "{S:stream 0x7}"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestSentinelsShared checks that the packages that re-export the driver's sentinels export the
// same values, so errors.Is matches whichever package wrapped them.
func TestSentinelsShared(t *testing.T) {
	pairs := []struct {
		name      string
		got, want error
	}{
		{"device.ErrNoDriver", device.ErrNoDriver, cuda.ErrNoDriver},
		{"device.ErrNoDevice", device.ErrNoDevice, cuda.ErrNoDevice},
		{"device.ErrOutOfMemory", device.ErrOutOfMemory, cuda.ErrOutOfMemory},
		{"internal ErrNotSupported", pinmalloc.ErrNotSupported, cuda.ErrNotSupported},
		{"internal ErrInvalidValue", pinmalloc.ErrInvalidValue, cuda.ErrInvalidValue},
		{"internal ErrInvalidHandle", pinmalloc.ErrInvalidHandle, cuda.ErrInvalidHandle},
		{"internal ErrNotReady", pinmalloc.ErrNotReady, cuda.ErrNotReady},
		{"internal ErrCapturing", pinmalloc.ErrCapturing, cuda.ErrCapturing},
		{"internal ErrClosed", pinmalloc.ErrClosed, cuda.ErrClosed},
	}
	if cuda.LibraryEnv != icuda.LibraryEnv {
		t.Errorf("LibraryEnv %q, the loader reads %q", cuda.LibraryEnv, icuda.LibraryEnv)
	}
	for _, p := range pairs {
		if p.got != p.want {
			t.Errorf("%s is not the public sentinel", p.name)
		}
	}
	// pinned has sentinels of its own that wrap the driver's: a pool without a driver matches both.
	_, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: 99})
	if !errors.Is(err, pinned.ErrNoDriver) || !(errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)) {
		t.Errorf("a CUDAHost pool on device 99 = %v; want pinned.ErrNoDriver wrapping the driver's sentinel", err)
	}
	wrapped := fmt.Errorf("outer: %w", icuda.Result(2))
	if !errors.Is(wrapped, cuda.ErrOutOfMemory) {
		t.Error("a wrapped CUDA_ERROR_OUT_OF_MEMORY does not match cuda.ErrOutOfMemory")
	}
	if code, ok := cuda.ResultCode(wrapped); !ok || code != 2 {
		t.Errorf("ResultCode = %d, %v; want 2", code, ok)
	}
	for _, err := range []error{nil, errors.New("not a driver error"), cuda.ErrOutOfMemory} {
		if code, ok := cuda.ResultCode(err); ok {
			t.Errorf("ResultCode(%v) = %d, true; want false", err, code)
		}
	}
}

// TestLocationValues checks the typed constants against cuda.h's numbers (CU_MEM_LOCATION_TYPE_*,
// CU_MEM_ADVISE_*): the providers hand them to the driver as they are.
func TestLocationValues(t *testing.T) {
	locs := []struct {
		got  cuda.LocationType
		want int32
	}{
		{cuda.LocationInvalid, 0}, {cuda.LocationDevice, 1}, {cuda.LocationHost, 2},
		{cuda.LocationHostNUMA, 3}, {cuda.LocationHostNUMACurrent, 4},
	}
	for _, l := range locs {
		if int32(l.got) != l.want {
			t.Errorf("location type %d, cuda.h has %d", l.got, l.want)
		}
	}
	advice := []struct {
		got  cuda.Advice
		want int32
	}{
		{cuda.AdviseSetReadMostly, 1}, {cuda.AdviseUnsetReadMostly, 2}, {cuda.AdviseSetPreferredLocation, 3},
		{cuda.AdviseUnsetPreferredLocation, 4}, {cuda.AdviseSetAccessedBy, 5}, {cuda.AdviseUnsetAccessedBy, 6},
	}
	for _, a := range advice {
		if int32(a.got) != a.want {
			t.Errorf("advice %d, cuda.h has %d", a.got, a.want)
		}
	}
	if cuda.HostLocation() != (cuda.Location{Type: cuda.LocationHost}) {
		t.Errorf("HostLocation = %+v", cuda.HostLocation())
	}
}
