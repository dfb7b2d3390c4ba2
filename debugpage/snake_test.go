package debugpage

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestSnakeName(t *testing.T) {
	for in, want := range map[string]string{
		"PeakInUse": "peak_in_use", "HugeTLBFallbacks": "huge_tlb_fallbacks", "CommitPerGiB": "commit_per_gib",
		"Live": "live", "DriverObjects": "driver_objects", "ID": "id", "FirstID": "first_id", "Ratio2X": "ratio2_x",
	} {
		if got := snakeName(in); got != want {
			t.Errorf("snakeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSnakeJSON: every key of a Go struct comes out in snake_case, in order, durations in ns,
// errors as text, embedded fields inline, tags kept.
func TestSnakeJSON(t *testing.T) {
	type inner struct{ BlockSize uint64 }
	type outer struct {
		inner
		PeakInUse  uint64
		CommitTime time.Duration
		Err        error
		NoErr      error
		Tagged     int `json:"custom"`
		Classes    []inner
		hidden     int
	}
	b, err := json.Marshal(snake(outer{inner{64}, 10, time.Millisecond, errors.New("boom"), nil, 3, []inner{{8}}, 1}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"block_size":64,"peak_in_use":10,"commit_time_ns":1000000,"err":"boom","custom":3,"classes":[{"block_size":8}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
