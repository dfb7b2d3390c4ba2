package arena

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// decommitRefusing refuses every decommit while refuse is set, as a provider whose madvise or unmap
// fails would.
type decommitRefusing struct {
	Provider
	refuse bool
}

func (p *decommitRefusing) Decommit(r *Region, off, size uintptr) error {
	if p.refuse {
		return fmt.Errorf("%w: %w", ErrInvalid, errInjected)
	}
	return p.Provider.Decommit(r, off, size)
}

// TestDecommitsRefusedCounted: a purge's decommit the provider refuses leaves the memory
// committed and is tried again at the next purge; Stats counts each refusal, so that a
// provider that will not give memory back shows, and the log says the first refusals. Before,
// the purge dropped the error and nothing said it.
func TestDecommitsRefusedCounted(t *testing.T) {
	p := &decommitRefusing{Provider: PageableHost(HostOptions{}), refuse: true}
	var out bytes.Buffer
	a := newTestArena(t, Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1,
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	s, err := a.Alloc(4<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	st := a.Stats()
	if st.DecommitsRefused == 0 || st.Committed == 0 {
		t.Fatalf("Trim with every decommit refused: %d refused, %d committed; want some of each", st.DecommitsRefused, st.Committed)
	}
	if want := `level=WARN msg="pinmalloc: decommit refused" provider=pageable size=`; !strings.Contains(out.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, out.String())
	}
	p.refuse = false
	a.Trim()
	if st2 := a.Stats(); st2.Committed != 0 || st2.DecommitsRefused != st.DecommitsRefused {
		t.Fatalf("Trim once the provider gives memory back: %d committed, %d refused; want 0, %d", st2.Committed, st2.DecommitsRefused, st.DecommitsRefused)
	}
}
