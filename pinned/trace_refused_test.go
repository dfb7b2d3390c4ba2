package pinned

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// TestTraceRefusedRecordSaid: an allocation the trace refuses to record (alloctrace's
// Writer.Alloc: one a well-formed trace cannot hold) leaves the trace short of a record; the
// next FlushTrace says so with ErrTrace, the count and the first refusal, rather than the
// refusal being dropped and the trace passing for whole.
func TestTraceRefusedRecordSaid(t *testing.T) {
	var out bytes.Buffer
	p, err := New(Options{Backend: Pageable, Capacity: 64 << 20, Trace: &out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.FlushTrace(); err != nil {
		t.Fatalf("FlushTrace with every record written: %v", err)
	}
	// Two records a trace cannot hold: a size of 0, and an alignment of 3.
	p.traceAlloc(0x1000, 0, 0)
	p.traceAlloc(0x2000, 64, 3)
	err = p.FlushTrace()
	if !errors.Is(err, ErrTrace) || !errors.Is(err, alloctrace.ErrFormat) {
		t.Fatalf("FlushTrace after two refused records: %v, want ErrTrace and alloctrace.ErrFormat", err)
	}
	if s := err.Error(); !strings.Contains(s, "2 allocations") || strings.Count(s, "pinned:") != 1 {
		t.Errorf("FlushTrace after two refused records: %q, want the count, and \"pinned:\" once", s)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrTrace) {
		t.Errorf("Close of a pool whose trace is short of records: %v, want ErrTrace", err)
	}
}
