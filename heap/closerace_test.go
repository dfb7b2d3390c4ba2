package heap

import (
	"errors"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestCloseRacesRemoteFrees: Close called again and again while other goroutines free the
// heap's last blocks through the group must refuse with ErrLiveBlocks until the last free has
// landed, then succeed, with every free done and none lost; a free after it is refused. Both
// retentions, blocks of every kind. 100 rounds.
func TestCloseRacesRemoteFrees(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1})
	mustOK(t, err)
	g, _ := NewGroup(a)
	sizes := []uintptr{16, 100, 5000, 40 << 10, 200 << 10, 700 << 10, 3 << 20}
	for round := range 100 {
		h, err := g.NewHeap(Options{Retention: Retention(round % 2)})
		mustOK(t, err)
		var ps []uintptr
		for i := range 40 {
			p, err := h.Alloc(sizes[(i+round)%len(sizes)])
			mustOK(t, err)
			ps = append(ps, p)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(ps); i += 4 {
					if err := g.Free(ps[i]); err != nil {
						errs <- err
					}
				}
			}()
		}
		for {
			err := h.Close()
			if err == nil {
				break
			}
			if !errors.Is(err, ErrLiveBlocks) {
				t.Fatalf("round %d: close: %v", round, err)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: remote free: %v", round, err)
		}
		for _, p := range ps {
			if err := g.Free(p); !errors.Is(err, ErrDoubleFree) {
				t.Fatalf("round %d: free of %#x after close: %v, want ErrDoubleFree", round, p, err)
			}
		}
	}
	mustOK(t, a.Close())
}
