package cudamem_test

import (
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZeroKeepsStream: the device and managed providers clear memory (arena.Zeroer) on one
// stream they make at the first clear and keep (clears side by side have one each), and
// Arena.Close destroys them. Before, each clear created a stream and destroyed it (what a
// device heap's every Zalloc paid).
func TestFakeZeroKeepsStream(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, pr := range providersOf(d, "DeviceMalloc", "DeviceVMM", "Managed") {
		p, err := pr.new()
		must(t, pr.name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		s, err := a.Alloc(1<<20, 256)
		must(t, "Alloc", err)
		for i := 0; i < 3; i++ {
			must(t, "Zero", a.Zero(s.Base, 4096))
		}
		if n := f.Stat(fakecuda.Streams); n != 1 {
			t.Errorf("%s: %d streams live after 3 clears, want 1 (kept)", pr.name, n)
		}
		if c := p.Counters(); c.Streams != 1 || c.Live() != c.Reservations+c.Allocations+c.Handles+1 {
			t.Errorf("%s: the provider counts %+v, its stream not among them", pr.name, c)
		}
		var wg sync.WaitGroup // clears side by side: a stream each, kept
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					if err := a.Zero(s.Base+uintptr(g)*4096, 4096); err != nil {
						t.Errorf("%s: Zero: %v", pr.name, err)
					}
				}
			}()
		}
		wg.Wait()
		if n := f.Stat(fakecuda.Streams); n < 1 || n > 4 {
			t.Errorf("%s: %d streams live after 4 goroutines' clears, want 1 to 4", pr.name, n)
		}
		must(t, "Free", a.Free(s))
		must(t, "arena.Close", a.Close())
		if n := f.Stat(fakecuda.Streams); n != 0 {
			t.Errorf("%s: %d streams live after the arena's Close", pr.name, n)
		}
		if c := p.Counters(); c.Live() != 0 {
			t.Errorf("%s: after the arena's Close: %+v", pr.name, c)
		}
	}
}
