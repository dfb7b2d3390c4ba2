//go:build cgo && linux

package fakecuda

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Calls racing the release of a primary context's last retain. The driver calls such a race
// undefined (cuCtxDestroy: the caller ensures no API call uses the context meanwhile), so no GPU
// is asked; the fake must still never act on a context destroyed under a call: a call that
// checked its context before the destruction and acts after it is refused as a call made after
// it (CUDA_ERROR_CONTEXT_IS_DESTROYED), and leaves nothing behind in the dead context.

// raceCall is one call made with device 0's primary context current; live reads what it would
// have left in the destroyed context (0: nothing).
type raceCall struct {
	name string
	call func(t *testing.T, p *primaryDriver) error
	live func(f *Driver) int64
}

func raceCalls(buf []byte) []raceCall {
	stat := func(s Stat) func(*Driver) int64 { return func(f *Driver) int64 { return f.Stat(s) } }
	return []raceCall{
		{"cuMemAlloc", func(t *testing.T, p *primaryDriver) error { _, err := p.MemAlloc(4096); return err },
			func(f *Driver) int64 { return f.Stat(DeviceAllocs) + int64(f.Used(0)) }},
		{"cuMemAllocManaged", func(t *testing.T, p *primaryDriver) error { _, err := p.MemAllocManaged(4096); return err },
			stat(ManagedAllocs)},
		{"cuMemHostAlloc", func(t *testing.T, p *primaryDriver) error { _, err := p.MemHostAlloc(4096); return err },
			stat(HostAllocs)},
		{"cuMemHostRegister", func(t *testing.T, p *primaryDriver) error { return p.MemHostRegister(mem.Addr(buf), uintptr(len(buf))) },
			stat(Registrations)},
		{"cuMemAllocAsync", func(t *testing.T, p *primaryDriver) error { _, err := p.MemAllocAsync(4096, 0); return err },
			stat(PoolAllocs)},
		{"cuMemAddressReserve", func(t *testing.T, p *primaryDriver) error { _, err := p.MemAddressReserve(2 << 20); return err },
			stat(Reservations)},
		{"cuMemCreate", func(t *testing.T, p *primaryDriver) error { _, err := p.MemCreate(2<<20, 0); return err },
			stat(Handles)},
		{"cuStreamCreate", func(t *testing.T, p *primaryDriver) error { _, err := p.StreamCreate(); return err },
			stat(Streams)},
		{"cuEventCreate", func(t *testing.T, p *primaryDriver) error { _, err := p.EventCreate(); return err },
			stat(Events)},
		{"cuModuleLoadData", func(t *testing.T, p *primaryDriver) error { _, err := p.ModuleLoadData(emptyPTX); return err },
			func(f *Driver) int64 { return f.Modules() }},
	}
}

// TestPrimaryCallRacingLastRelease: a call that has checked its context (the fake stops it
// there with PauseNextCall) while another thread releases the context's last retain is refused
// with CUDA_ERROR_CONTEXT_IS_DESTROYED when it goes on, and leaves no object in the destroyed
// context: the fake checked the context only as a call started, so each call here acted on the
// destroyed context (memory, registrations, streams, events and modules nothing would ever
// reclaim).
func TestPrimaryCallRacingLastRelease(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	if _, err := cuda.Count(); err != nil {
		t.Fatalf("cuda.Count: %v", err)
	}
	p, err := openPrimaryDriver()
	must(t, "openPrimaryDriver", err)
	buf, err := unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	must(t, "Mmap", err)
	defer unix.Munmap(buf)
	for _, c := range raceCalls(buf) {
		t.Run(c.name, func(t *testing.T) {
			ctx, err := p.Retain(0)
			must(t, "cuDevicePrimaryCtxRetain", err)
			if !f.PauseNextCall() {
				t.Fatal("PauseNextCall: a pause is armed already")
			}
			done := make(chan error, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if err := p.Push(ctx); err != nil {
					done <- err
					return
				}
				err := c.call(t, p)
				_, _ = p.Pop()
				done <- err
			}()
			for deadline := time.Now().Add(10 * time.Second); !f.Paused(); time.Sleep(50 * time.Microsecond) {
				if time.Now().After(deadline) {
					f.ResumeCall()
					t.Fatalf("%s never reached its pause", c.name)
				}
			}
			must(t, "cuDevicePrimaryCtxRelease (the last retain)", p.Release(0))
			f.ResumeCall()
			answer(t, c.name+" checked before the last release, going on after it", <-done, codeContextIsDestroyed)
			if n := c.live(f); n != 0 {
				t.Errorf("%s left %d in the destroyed context", c.name, n)
			}
			if n := f.ForgetReclaimed(); n != 0 {
				t.Errorf("the destruction reclaimed %d objects; the call made none", n)
			}
		})
	}
}

// TestPrimaryCallsRacingLastRelease: threads that allocate, create streams and events and
// register memory as fast as they can while the context's last retain is released, round after
// round (run it under -race): every object a call made is one the destruction reclaimed, and
// none is left in the destroyed context once every call has returned.
func TestPrimaryCallsRacingLastRelease(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	if _, err := cuda.Count(); err != nil {
		t.Fatalf("cuda.Count: %v", err)
	}
	p, err := openPrimaryDriver()
	must(t, "openPrimaryDriver", err)
	// Each thread makes at most callsPerRound calls a round: a release that comes late (the
	// threads hold the driver's lock) still meets calls in flight, and a round's objects, which
	// every call of the fake walks, stay bounded.
	const callsPerRound = 128
	rounds, workers := 200, 3
	if Long() {
		rounds = 2000
	}
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i], err = unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
		must(t, "Mmap", err)
		defer unix.Munmap(bufs[i])
	}
	raced := 0 // rounds whose release a call met
	for r := 0; r < rounds; r++ {
		ctx, err := p.Retain(0)
		must(t, "cuDevicePrimaryCtxRetain", err)
		var wg sync.WaitGroup
		made := make([]int64, workers)
		errs := make([]error, workers)
		met := make([]bool, workers) // a call met the destroyed context
		started := make(chan struct{}, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if errs[w] = p.Push(ctx); errs[w] != nil {
					started <- struct{}{}
					return
				}
				defer p.Pop()
				started <- struct{}{}
				var calls []raceCall
				for _, c := range raceCalls(bufs[w]) {
					switch c.name {
					case "cuMemAddressReserve", "cuMemCreate", "cuMemAllocAsync": // memory of no context: the destruction leaves it
					default:
						calls = append(calls, c)
					}
				}
				registered := false
				for i := 0; i < callsPerRound; i++ {
					c := calls[(w+i)%len(calls)]
					if c.name == "cuMemHostRegister" {
						if registered {
							continue // one registration of the buffer a round, ended by the destruction
						}
						registered = true
					}
					err := c.call(t, p)
					if err == nil {
						made[w]++
						continue
					}
					var res cuda.Result
					if !errors.As(err, &res) || res != codeContextIsDestroyed {
						errs[w] = err
					}
					met[w] = true
					return
				}
			}(w)
		}
		for w := 0; w < workers; w++ {
			<-started
		}
		runtime.Gosched()
		must(t, "cuDevicePrimaryCtxRelease (the last retain)", p.Release(0))
		wg.Wait()
		var total int64
		for w := range made {
			total += made[w]
			if errs[w] != nil {
				t.Fatalf("round %d, worker %d: %v", r, w, errs[w])
			}
		}
		if slices.Contains(met, true) {
			raced++
		}
		if got := f.ForgetReclaimed(); got != total {
			t.Fatalf("round %d: the calls made %d objects, the destruction reclaimed %d", r, total, got)
		}
		if live := f.LiveObjects(); len(live) != 0 {
			t.Fatalf("round %d: %v left in the destroyed context", r, live)
		}
		if n := f.Modules(); n != 0 {
			t.Fatalf("round %d: %d modules left in the destroyed context", r, n)
		}
	}
	if raced == 0 {
		t.Fatalf("in none of %d rounds did a call meet the destroyed context: nothing raced the release", rounds)
	}
	t.Logf("%d of %d rounds' releases met calls in flight", raced, rounds)
}
