package procpin

import (
	"runtime"
	"sync"
	"testing"
)

// TestID checks that IDs are small (below GOMAXPROCS for the linkname build) and that
// goroutines running at once on several Ps are told different ones some of the time.
func TestID(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range 4 * procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				id := ID()
				if id < 0 {
					t.Errorf("ID() = %d", id)
				}
				mu.Lock()
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if max := maxID(procs); len(seen) > max+1 {
		t.Errorf("%d distinct IDs for GOMAXPROCS=%d", len(seen), procs)
	}
	if procs > 1 && len(seen) < 2 {
		t.Logf("only one ID seen with GOMAXPROCS=%d (goroutines may all have run on one P)", procs)
	}
}

func BenchmarkID(b *testing.B) {
	for b.Loop() {
		_ = ID()
	}
}
