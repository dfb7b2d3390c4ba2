package fakecuda

import (
	"bytes"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	ipattern "github.com/pinmalloc/pinmalloc/internal/pattern"
)

// TestStress runs goroutines against the fake at once, each on its own stream and its own
// granules of one shared reservation: commits and decommits of device and host granules beside
// each other, registrations, copies sync and async, events; every granule's bytes are checked
// against what was written: 60 rounds, 300 in the long form (Long), 20 under the race detector
// (RaceEnabled: the six workers still overlap their commits, copies and events; the checks of
// each granule's bytes are a goroutine's own).
func TestStress(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	workers, rounds := 6, 60
	switch {
	case Long():
		rounds = 300
	case RaceEnabled:
		rounds = 20
	}
	const per = 4 // granules per worker
	va, err := d.MemAddressReserve(uintptr(workers*per)*gran, 0)
	must(t, "MemAddressReserve", err)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = stressWorker(f, d, va+uintptr(w*per)*gran, per, rounds, int64(w))
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", w, err)
		}
	}
	must(t, "MemAddressFree", d.MemAddressFree(va, uintptr(workers*per)*gran))
}

// granule is one of a stress worker's granules.
type granule struct {
	h    cuda.MemHandle
	host bool   // a host granule (else device)
	seed byte   // what it holds: pattern(seed)
	raw  bool   // h came from Driver.MemCreate
	live bool   // mapped
	cpu  []byte // host granules: the CPU's view
}

// pattern fills b with seed + i/256 + i at byte i. The pattern repeats every 64 KiB, so the
// first period is computed and doubled by copies: a byte loop over every granule checked was
// most of TestStress's time.
func pattern(b []byte, seed byte) {
	ipattern.Fill(b, patternPeriod, func(i int) byte { return seed + byte(i>>8) + byte(i) })
}

// patternPeriod is the period of pattern's bytes.
const patternPeriod = 1 << 16

func stressWorker(f *Driver, d *cuda.Device, base cuda.DevicePtr, per, rounds int, seed int64) (err error) {
	rng := rand.New(rand.NewSource(seed))
	s, err := d.StreamCreate(true)
	if err != nil {
		return err
	}
	ev, err := d.EventCreate(true)
	if err != nil {
		return err
	}
	gs := make([]granule, per)
	hostBuf := make([]byte, 2*gran+8192)
	want, got := make([]byte, gran), make([]byte, gran)
	at := func(i int) cuda.DevicePtr { return base + uintptr(i)*gran }
	check := func(i int, fresh bool) error {
		g := &gs[i]
		pattern(want, g.seed)
		if fresh {
			clear(want)
		}
		clear(got)
		if err := d.MemcpyDtoHAsync(mem.Addr(got), at(i), gran, s); err != nil {
			return fmt.Errorf("DtoH of granule %d: %w", i, err)
		}
		if err := d.StreamSynchronize(s); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("granule %d (host %v, fresh %v) lost its bytes", i, g.host, fresh)
		}
		if g.host && !bytes.Equal(g.cpu, want) {
			return fmt.Errorf("host granule %d: the CPU's view differs", i)
		}
		return nil
	}
	release := func(i int) error {
		g := &gs[i]
		if err := d.MemUnmap(at(i), gran); err != nil {
			return fmt.Errorf("MemUnmap: %w", err)
		}
		g.live, g.cpu = false, nil
		if g.raw {
			return f.MemRelease(d, g.h)
		}
		return d.MemRelease(g.h)
	}
	defer func() {
		for i := range gs {
			if gs[i].live {
				if e := check(i, false); e != nil && err == nil {
					err = e
				}
				if e := release(i); e != nil && err == nil {
					err = e
				}
			}
		}
		if e := d.EventDestroy(ev); e != nil && err == nil {
			err = e
		}
		if e := d.StreamDestroy(s); e != nil && err == nil {
			err = e
		}
		runtime.KeepAlive(hostBuf)
	}()
	for r := 0; r < rounds; r++ {
		i := rng.Intn(per)
		g := &gs[i]
		switch op := rng.Intn(5); {
		case !g.live: // commit, fill
			g.host = rng.Intn(2) == 0
			acc := []Access{{Loc: cuda.MemLocation{Type: locDevice}, Flags: AccessReadWrite}}
			if g.host {
				g.h, err = f.MemCreate(d, gran, cuda.MemLocation{Type: locHost}, 0)
				acc = append(acc, Access{Loc: cuda.MemLocation{Type: locHost}, Flags: AccessReadWrite})
			} else {
				g.h, err = d.MemCreate(gran)
			}
			if err != nil {
				return fmt.Errorf("MemCreate: %w", err)
			}
			g.raw = g.host
			if err := d.MemMap(at(i), gran, g.h); err != nil {
				return fmt.Errorf("MemMap: %w", err)
			}
			g.live = true
			if err := f.MemSetAccess(d, at(i), gran, acc...); err != nil {
				return fmt.Errorf("MemSetAccess: %w", err)
			}
			if g.host {
				g.cpu = mem.Bytes(at(i), gran)
			}
			g.seed = byte(rng.Intn(256))
			if err := check(i, true); err != nil {
				return err
			}
			pattern(want, g.seed)
			if err := d.MemcpyHtoD(at(i), mem.Addr(want), gran); err != nil {
				return fmt.Errorf("HtoD: %w", err)
			}
			// From pageable memory, HtoD returns once the bytes are staged, the copy still queued
			// on the legacy stream, which s (non-blocking) does not wait for.
			if err := d.StreamSynchronize(0); err != nil {
				return err
			}
		case op == 0: // decommit
			if err := check(i, false); err != nil {
				return err
			}
			if err := release(i); err != nil {
				return err
			}
		case op == 1 && g.host: // rewrite through the CPU
			g.seed++
			pattern(g.cpu, g.seed)
		case op == 1: // rewrite with a memset then a copy
			if err := d.MemsetD8Async(at(i), 0xEE, gran, s); err != nil {
				return err
			}
			g.seed += 3
			pattern(want, g.seed)
			if err := d.MemcpyHtoDAsync(at(i), mem.Addr(want), gran, s); err != nil {
				return err
			}
		case op == 2: // a registration: copy in from it, asynchronously
			b := (mem.Addr(hostBuf) + 4095) &^ 4095
			if err := d.MemHostRegister(b, 2*gran, 0); err != nil {
				return fmt.Errorf("MemHostRegister: %w", err)
			}
			g.seed += 5
			pattern(mem.Bytes(b+gran/2, gran), g.seed)
			if err := d.MemcpyHtoDAsync(at(i), b+gran/2, gran, s); err != nil {
				return err
			}
			if err := d.EventRecord(ev, s); err != nil {
				return err
			}
			if err := d.EventSynchronize(ev); err != nil {
				return err
			}
			if err := d.MemHostUnregister(b); err != nil {
				return err
			}
		case op == 3 && i+1 < per && gs[i+1].live && g.host && gs[i+1].host: // one copy over two host granules
			dp, err := d.MemAlloc(2 * gran)
			if err != nil {
				return err
			}
			if err := d.MemcpyHtoD(dp, at(i), 2*gran); err != nil {
				return fmt.Errorf("HtoD over two host granules: %w", err)
			}
			if err := d.MemcpyDtoD(at(i), dp+gran, gran); err != nil { // granule i now holds i+1's bytes
				return err
			}
			g.seed = gs[i+1].seed
			if err := d.MemFree(dp); err != nil {
				return err
			}
		default:
			if err := check(i, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestPattern checks that pattern's copies write seed + i/256 + i at every byte, across several
// periods.
func TestPattern(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, patternPeriod - 1, patternPeriod, 3*patternPeriod + 5} {
		b := make([]byte, n)
		pattern(b, 7)
		for i := range b {
			if want := 7 + byte(i>>8) + byte(i); b[i] != want {
				t.Fatalf("pattern of %d bytes: byte %d is %#x, want %#x", n, i, b[i], want)
			}
		}
	}
}
