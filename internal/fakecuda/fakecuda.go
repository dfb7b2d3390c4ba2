// Package fakecuda builds a fake CUDA driver library for tests and runs tests against it, so
// that the CUDA code paths of pinmalloc are exercised on machines with no GPU and no CUDA.
//
// The fake (fakedriver.c.in) is compiled with the C compiler once per user and source, into the
// user's cache directory (Cached). Because internal/cuda loads its driver once per process, a test
// that wants the fake runs in a child process: Run re-executes the test binary for that one test
// with cuda.LibraryEnv pointing at the fake, reports the child's result as the test's own, and
// returns nil; in the child it returns a *Driver that controls the fake (stream completion, memory
// size, failure injection) and reads its counters. A GPU machine runs the same tests: the parent
// keeps the real driver and the child gets the fake.
//
// The fake keeps device memory in host memory (cuMemCreate is a memfd that cuMemMap maps into
// a PROT_NONE reservation), so copies, memsets and VMM commits move and protect real bytes.
// Work queued on a stream (async copies and memsets, batches, kernels; the synchronous calls
// queue theirs on the legacy default stream) is checked at the call but moves its bytes only
// when CUDA says it must have completed, as late as a GPU may run it: at a stream, event or
// context synchronize, a query that finds it pending, a synchronous copy that waits for it, a
// cuMemFree, Complete or CompleteStream (the list is at the top of fakedriver.c.in). So a host
// buffer changed after an async copy is queued and before that copy is synchronized sends the
// changed bytes, a destination read early reads stale bytes, and memory freed or unmapped under
// queued work makes that work fault (CUDA_ERROR_ILLEGAL_ADDRESS, sticky for the context of the
// stream it ran on: another device's context goes on working, but work it queues onto the
// faulted context's streams, or waits for on its events, answers that error), as on a GPU.
// With Hold on, queries answer "not ready" instead of running the work. CU_STREAM_PER_THREAD
// is the calling thread's own blocking stream of the current context. A call the driver counts
// potentially unsafe (cuMemAlloc, cuMemHostRegister, the pool attributes, ...) is refused where
// the capture interaction mode prohibits it (in the default GLOBAL mode, beside any capture
// begun GLOBAL), and invalidates the capture.
//
// RunDevice is Run plus opening device 0; RunWithoutDriver runs a test where no driver can be
// loaded. GPU is for tests of the real driver: it opens a device or skips the test with "no
// CUDA driver".
package fakecuda

import (
	_ "embed" // the fake driver's C source
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Source is the fake driver's C source.
//
//go:embed fakedriver.c.in
var Source string

// childEnv marks a child process run by Run; its value is the fake library's path, or
// noDriver for RunWithoutDriver.
const childEnv = "PINMALLOC_FAKECUDA_CHILD"

const noDriver = "none"

// NameEnv names the environment variable that, set, gives the name every device of the fake
// reports ("Fake GPU n" otherwise): a test poses the fake as a GPU with it, to prove that
// nothing grades the fake as one (IsFake tells them apart by the library, not by the name).
const NameEnv = "PINMALLOC_FAKECUDA_NAME"

// openDevice is cuda.Open; a test of GPU replaces it to make the open fail.
var openDevice = cuda.Open

// Stat names one of the fake's counters of live objects and calls.
type Stat int

// Counters kept by the fake.
const (
	// Registrations counts host ranges registered with cuMemHostRegister.
	Registrations Stat = iota
	// HostAllocs counts cuMemHostAlloc allocations.
	HostAllocs
	// DeviceAllocs counts cuMemAlloc allocations.
	DeviceAllocs
	// ManagedAllocs counts cuMemAllocManaged allocations.
	ManagedAllocs
	// Reservations counts cuMemAddressReserve reservations.
	Reservations
	// Handles counts cuMemCreate handles not yet released.
	Handles
	// Mappings counts cuMemMap mappings.
	Mappings
	// Streams counts streams.
	Streams
	// Events counts events.
	Events
	// RegisterCalls counts cuMemHostRegister calls, successful or not.
	RegisterCalls
	// CreateCalls counts cuMemCreate calls, successful or not.
	CreateCalls
	// RegisteredBytes is the host memory registered now.
	RegisteredBytes
	// Retains counts primary-context retains outstanding, over all devices (Driver.Retains: one
	// device's).
	Retains
	// PinnedCopies counts copies whose host side was pinned memory: inside one registration,
	// one cuMemHostAlloc block, or one run of mapped VMM host granules (the driver's DMA path).
	PinnedCopies
	// PinnedBytes is the bytes those copies moved.
	PinnedBytes
	// PageableCopies counts copies whose host side touched no pinned memory at all (staged by
	// the driver through its own buffers, at a fraction of the bandwidth).
	PageableCopies
	// PageableBytes is the bytes those copies moved.
	PageableBytes
	// HostVMMBytes is the host memory held by cuMemCreate handles with a host location.
	HostVMMBytes
	// EventRecords counts cuEventRecord calls that succeeded.
	EventRecords
	// StreamQueries counts cuStreamQuery calls, valid stream or not (how often a caller asks
	// the driver about a stream).
	StreamQueries
	// Pools counts memory pools (cuMemPoolCreate) not destroyed.
	Pools
	// PoolAllocs counts allocations from memory pools (cuMemAllocFromPoolAsync) not freed.
	PoolAllocs
	// StreamSyncs counts cuStreamSynchronize calls, valid stream or not (how often a caller
	// waits for a stream).
	StreamSyncs
	// StreamWaits counts cuStreamWaitEvent calls that succeeded (how often a caller orders one
	// stream after another's event).
	StreamWaits
	// Reclaimed counts what the destruction of a primary context (the release of a device's last
	// retain) freed because the program had not: allocations, registrations, streams, events and
	// modules of the context. Each is a leak; a test that leaves them to the driver on purpose
	// reads and clears the count with ForgetReclaimed.
	Reclaimed
	// CtxSyncs counts cuCtxSynchronize calls made with a context current, refused or not (how
	// often a caller waits for every stream of a context).
	CtxSyncs
	// StreamContextAsks counts cuStreamGetCtx calls made with a context current, valid stream
	// or not (how often a caller asks the driver which context a stream is of).
	StreamContextAsks
	numStats
)

// Live is the list of counters of live objects, those that must be zero when everything is
// freed.
var Live = []Stat{Registrations, HostAllocs, DeviceAllocs, ManagedAllocs, Reservations, Handles, Mappings, Streams, Events, Retains, HostVMMBytes,
	Pools, PoolAllocs, Reclaimed}

// Controls understood by fake_ctl (the FC_ constants of the C source).
const (
	ctlHold = 1 + iota
	ctlCompleteAll
	ctlStat
	ctlDevices
	ctlMemory
	ctlVMM
	ctlFailRegister
	ctlUsed
	ctlPending
	ctlCompleteStream
	ctlHostVMM
	ctlNUMANodes
	ctlHostPools
	ctlDriverVersion
	ctlReuseStreams
	ctlForgetReclaimed
	ctlRetains
	ctlPause
	ctlMapsFile
	ctlListed
)

// Result codes for FailRegister.
const (
	// ResultOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
	ResultOutOfMemory = 2
	// ResultNotPermitted is CUDA_ERROR_NOT_PERMITTED.
	ResultNotPermitted = 800
)

// Run runs the calling test against the fake driver. In the test process it builds the fake,
// runs the test again in a child process that loads the fake, fails or skips as the child did,
// and returns nil: the caller returns at once. In the child it returns the fake's controls.
// t must be a top-level test. It skips when there is no C compiler or no cgo.
func Run(t *testing.T) *Driver {
	t.Helper()
	if path := os.Getenv(childEnv); path != "" && path != noDriver {
		d, err := open(path)
		if err != nil {
			t.Fatalf("fakecuda: %v", err)
		}
		return d
	}
	if !cgoEnabled {
		t.Skip("fakecuda: built without cgo: no driver can be loaded")
	}
	lib := build(t)
	runChild(t, lib, lib)
	return nil
}

// RunDevice is Run followed, in the child, by Open of device 0: in the test process it returns
// nil, nil after reporting the child's result.
func RunDevice(t *testing.T) (*Driver, *cuda.Device) {
	t.Helper()
	f := Run(t)
	if f == nil {
		return nil, nil
	}
	return f, f.Open(t, 0)
}

// RunWithoutDriver runs the calling test in a child process where no driver library can be
// loaded (cuda.Load fails with ErrNoDriver), even on a machine with a GPU. It returns true in
// the child, which then runs the test body, and false in the test process after reporting the
// child's result. Without cgo there is never a driver, and it returns true at once.
func RunWithoutDriver(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == noDriver || !cgoEnabled {
		return true
	}
	runChild(t, filepath.Join(t.TempDir(), "no-such-libcuda.so.1"), noDriver)
	return false
}

// build returns the fake's library (Cached: compiled once per user and source, else into t's
// temporary directory). It skips t when there is no C compiler.
func build(t testing.TB) string {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("%v", err)
	}
	lib, err := Cached(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// runChild runs t's test alone in a child process that loads the driver library at lib, with
// childEnv set to marker.
func runChild(t *testing.T, lib, marker string) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("fakecuda: %s is a subtest; call Run from a top-level test", t.Name())
	}
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v"}
	// The child's coverage counts too; -failfast stops its subtests at the first failure.
	for _, name := range []string{"test.gocoverdir", "test.timeout", "test.failfast"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			args = append(args, "-"+name+"="+f.Value.String())
		}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cuda.LibraryEnv+"="+lib, childEnv+"="+marker)
	if _, set := os.LookupEnv("GORACE"); !set {
		// A race-detector binary sleeps a second at exit (atexit_sleep_ms) for late reports:
		// the child's test has ended, and a second per test was most of -race's time.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	var out []byte
	err := runTied(cmd, func() (err error) { out, err = cmd.CombinedOutput(); return err })
	switch {
	case err != nil:
		t.Fatalf("fakecuda: %s in a child process: %v\n%s", t.Name(), err, out)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()+" "):
		t.Skipf("fakecuda: skipped in the child process:\n%s", out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()+" "):
		t.Fatalf("fakecuda: %s did not run in the child process:\n%s", t.Name(), out)
	case testing.Verbose():
		t.Logf("child process:\n%s", out)
	}
}

// Driver controls the fake driver loaded in this process.
type Driver struct {
	lib handle
}

// Hold makes cuStreamQuery and cuEventQuery of pending work answer CUDA_ERROR_NOT_READY (on),
// so that work stays pending until Complete or a synchronizing call; off (the default), such a
// query runs the work and succeeds. Turning it off completes nothing.
func (d *Driver) Hold(on bool) { d.ctl(ctlHold, b2i(on), 0) }

// Complete runs the work pending on every stream.
func (d *Driver) Complete() { d.ctl(ctlCompleteAll, 0, 0) }

// CompleteStream runs the work pending on one stream (0 or 1: device 0's legacy stream; 2: the
// calling thread's per-thread default stream of device 0), after the work it waits for.
func (d *Driver) CompleteStream(s cuda.Stream) { d.ctl(ctlCompleteStream, int64(s), 0) }

// Pending returns the number of streams with work queued and not yet run.
func (d *Driver) Pending() int { return int(d.ctl(ctlPending, 0, 0)) }

// listed returns how many streams (pools false) or pools the fake keeps in the list that every
// synchronize walks (for tests: a destroyed stream leaves it once its work has run).
func (d *Driver) listed(pools bool) int { return int(d.ctl(ctlListed, b2i(pools), 0)) }

// Stat returns one counter.
func (d *Driver) Stat(s Stat) int64 { return d.ctl(ctlStat, int64(s), 0) }

// LiveObjects returns the counters of Live that are not zero, by name; empty means nothing
// leaked.
func (d *Driver) LiveObjects() map[string]int64 {
	names := []string{"registrations", "host allocs", "device allocs", "managed allocs", "reservations",
		"handles", "mappings", "streams", "events", "register calls", "create calls", "registered bytes", "retains",
		"pinned copies", "pinned bytes", "pageable copies", "pageable bytes", "host VMM bytes", "event records", "stream queries",
		"pools", "pool allocs", "stream synchronizes", "stream waits", "reclaimed by a context's destruction"}
	m := map[string]int64{}
	for _, s := range Live {
		if v := d.Stat(s); v != 0 {
			m[names[s]] = v
		}
	}
	return m
}

// ForgetReclaimed returns the Reclaimed count and sets it to zero, for a test that leaves objects
// to a context's destruction on purpose.
func (d *Driver) ForgetReclaimed() int64 { return d.ctl(ctlForgetReclaimed, 0, 0) }

// Retains returns the retains that hold device dev's primary context (-1 for a device out of
// range); Stat(Retains) is their sum over the devices.
func (d *Driver) Retains(dev int) int64 { return d.ctl(ctlRetains, int64(dev), 0) }

// ReadMapsFile, on, makes the fake learn the process's mappings (its check of the pages of a
// pageable copy and of a registration) by reading /proc/self/maps whole, as it does where the
// kernel lacks the PROCMAP_QUERY ioctl (before Linux 6.11); off (the default), by the ioctl,
// one mapping at a time. It reports whether the ioctl answers now.
func (d *Driver) ReadMapsFile(on bool) (query bool) { return d.ctl(ctlMapsFile, b2i(on), 0) == 1 }

// PauseNextCall makes the next driver call that needs a context, on any thread, stop right
// after its check of the context and before it acts, until ResumeCall: with Paused to wait for
// it, a test makes the call race what it does meanwhile (the release of the context's last
// retain, say) the same way every run. It returns false, arming nothing, when a pause is armed
// or a call stopped already.
func (d *Driver) PauseNextCall() bool { return d.ctl(ctlPause, 1, 0) == 0 }

// Paused reports whether a call stopped by PauseNextCall is waiting.
func (d *Driver) Paused() bool { return d.ctl(ctlPause, 2, 0) == 1 }

// ResumeCall lets the call stopped by PauseNextCall go on, or disarms a pause no call met.
func (d *Driver) ResumeCall() { d.ctl(ctlPause, 0, 0) }

// SetDevices sets the number of devices (1 by default, at most 16: enough for a device and
// the 15 others the driver can grant access to in one call, with the host). With 0 the fake is
// a driver that initializes and counts no device, as some set-ups answer (most refuse cuInit
// with CUDA_ERROR_NO_DEVICE first): cuDeviceGetCount gives 0 and no ordinal opens.
func (d *Driver) SetDevices(n int) {
	if d.ctl(ctlDevices, int64(n), 0) != 0 {
		panic(fmt.Sprintf("fakecuda: SetDevices(%d): out of range", n))
	}
}

// SetMemory sets a device's total memory (1 GiB by default).
func (d *Driver) SetMemory(dev int, bytes uint64) { d.ctl(ctlMemory, int64(dev), int64(bytes)) }

// Used returns the device memory in use on a device.
func (d *Driver) Used(dev int) uint64 { return uint64(d.ctl(ctlUsed, int64(dev), 0)) }

// SetVMM turns the virtual memory management API on (the default) or off (its calls then
// fail with CUDA_ERROR_NOT_SUPPORTED and the device attribute reads 0).
func (d *Driver) SetVMM(on bool) { d.ctl(ctlVMM, b2i(on), 0) }

// SetHostVMM turns VMM host memory on (the default) or off, to emulate a driver older than
// CUDA 12.2: off, the device attributes HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (141) and
// HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (145) read 0, and cuMemCreate or
// cuMemGetAllocationGranularity with a host location fail with CUDA_ERROR_NOT_SUPPORTED.
func (d *Driver) SetHostVMM(on bool) { d.ctl(ctlHostVMM, b2i(on), 0) }

// SetHostPools turns memory pools in host memory on (the default) or off: off, the fake
// emulates a driver of CUDA 12.4 (SetDriverVersion), whose cuMemPoolCreate refuses HOST and
// HOST_NUMA locations with CUDA_ERROR_NOT_SUPPORTED; on, one of 13.0.
func (d *Driver) SetHostPools(on bool) { d.ctl(ctlHostPools, b2i(on), 0) }

// SetDriverVersion sets the CUDA version the fake emulates (13000 by default: 1000*major +
// 10*minor), which cuDriverGetVersion reports: pools at a HOST_NUMA location from 12060, device
// attribute 142 (HOST_NUMA_MEMORY_POOLS_SUPPORTED) from 12090, pools at the HOST location and
// attribute 144 from 13000; an attribute newer than the version is CUDA_ERROR_INVALID_VALUE. It
// returns false, changing nothing, for a version out of 11000 - 99000.
func (d *Driver) SetDriverVersion(v int) bool { return d.ctl(ctlDriverVersion, int64(v), 0) == 0 }

// SetNUMANodes sets the number of host NUMA nodes (1 by default, at most 8): the valid ids of
// a HOST_NUMA location. Device i's nearest node (attribute HOST_NUMA_ID, 134) is i modulo n.
// It returns false, changing nothing, for n out of range.
func (d *Driver) SetNUMANodes(n int) bool { return d.ctl(ctlNUMANodes, int64(n), 0) == 0 }

// ReuseStreamHandles makes cuStreamCreate hand out the handle of the stream destroyed last, as
// the real driver does (on, the default), or a handle of its own to every stream created from
// then on (off): a handle kept past its stream's cuStreamDestroy, or its context's destruction,
// names the next stream created, which a table keyed by handle takes for the old one. The
// destroyed stream's queued work still runs, and its events stay its own. Turn it off only in a
// test that truly needs distinct handles, and say there why: off, the fake is kinder than the
// driver.
func (d *Driver) ReuseStreamHandles(on bool) { d.ctl(ctlReuseStreams, b2i(on), 0) }

// FailRegister makes the next n calls of cuMemHostRegister fail with the given result code.
func (d *Driver) FailRegister(n, code int) { d.ctl(ctlFailRegister, int64(n), int64(code)) }

// Open opens device ordinal through internal/cuda. At t's cleanup it checks that nothing
// allocated through the device is live, closes it and, once no device is open any more, checks
// that the fake holds no object.
func (d *Driver) Open(t testing.TB, ordinal int) *cuda.Device {
	t.Helper()
	dev, err := cuda.Open(ordinal)
	if err != nil {
		t.Fatalf("cuda.Open(%d): %v", ordinal, err)
	}
	closeAtCleanup(t, dev, func() {
		if live := d.LiveObjects(); cuda.PrimaryRetains() == 0 && len(live) != 0 {
			t.Errorf("the fake driver holds %v at the end of the test", live)
		}
	})
	return dev
}

// GPU opens device ordinal of the real driver for a test or benchmark that needs a GPU. It skips it
// only where there is no GPU to test: with "no CUDA driver: ..." where no driver loads (or the
// driver loaded is the fake, whatever its devices are called), with "no CUDA device: ..." where the
// driver finds no device of that ordinal. Any other error of cuda.Open (a broken driver, a missing
// entry point, out of memory, a busy device) fails the test: on a GPU machine it is a fault to
// report, not a reason to test nothing. At cleanup it checks that nothing allocated through the
// device is live and closes it.
func GPU(tb testing.TB, ordinal int) *cuda.Device {
	tb.Helper()
	if os.Getenv(childEnv) != "" {
		tb.Skipf("no CUDA driver: this process runs against the fake driver")
	}
	dev, err := openDevice(ordinal)
	switch {
	case errors.Is(err, pinmalloc.ErrNoDriver):
		tb.Skipf("%v", err) // the error says "cuda: no CUDA driver" and why
	case errors.Is(err, pinmalloc.ErrNoDevice):
		tb.Skipf("%v", err) // "cuda: no CUDA device" and why
	case err != nil:
		tb.Fatalf("fakecuda.GPU: the driver loads but device %d does not open: %v", ordinal, err)
	case dev.IsFake():
		name, _ := dev.Name()
		tb.Cleanup(func() { _ = dev.Close() })
		tb.Skipf("no CUDA driver: the driver loaded is pinmalloc's fake (its device is called %q)", name)
	}
	closeAtCleanup(tb, dev, func() {})
	return dev
}

// closeAtCleanup checks at tb's cleanup that nothing allocated through dev is live, closes it,
// then runs after.
func closeAtCleanup(tb testing.TB, dev *cuda.Device, after func()) {
	tb.Cleanup(func() {
		if s := dev.Stats(); s.Live() != 0 {
			tb.Errorf("device %d: resources live at the end: %+v", dev.Ordinal(), s)
		}
		if err := dev.Close(); err != nil {
			tb.Errorf("device %d: Close: %v", dev.Ordinal(), err)
		}
		after()
	})
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
