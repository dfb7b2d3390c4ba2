package arena

import (
	"errors"
	"sync"
	"testing"
)

// TestHostProviderReleaseRacing: of several Releases of one region racing, one unmaps it and the
// others are refused with ErrInvalid. Before, each read "not released yet" before any marked it,
// and all of them unmapped the range: the later munmaps hit whatever a Reserve had mapped there
// in between (the kernel reuses the address), and the race detector reported the field.
func TestHostProviderReleaseRacing(t *testing.T) {
	p := PageableHost(HostOptions{})
	for range 200 {
		r, err := p.Reserve(1<<20, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.Release(r)
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrInvalid):
				t.Fatalf("a racing Release: %v, want ErrInvalid", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of %d racing Releases of one region unmapped it, want 1", ok, n)
		}
	}
}
