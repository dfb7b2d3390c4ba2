package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// TestReplayFailureFailsTheRun checks that -replay returns an error (main exits 1) when an
// allocator failed to replay the trace, after writing what the others measured: the failure
// was a "failed: ..." row and the run exited 0.
func TestReplayFailureFailsTheRun(t *testing.T) {
	var buf bytes.Buffer
	w := alloctrace.NewWriter(&buf)
	if err := w.Alloc(0x1000, 4096, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Free(0x1000, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "one.pmtrace")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := impl{name: "broken", replay: func([]alloctrace.Event, int64) (*replayResult, error) {
		return nil, errors.New("boom")
	}}
	out := t.TempDir()
	cfg := &config{implFilter: regexp.MustCompile(""), out: out, name: "t"}
	err := runReplay(cfg, []impl{newGoMake(), broken}, path)
	if !errors.Is(err, errReplayFailed) || !strings.Contains(err.Error(), "broken") {
		t.Errorf("replay with a failing allocator: %v, want errReplayFailed, naming it", err)
	}
	if _, err := os.Stat(filepath.Join(out, "t-replay.json")); err != nil {
		t.Errorf("the results were not written: %v", err)
	}
	if err := runReplay(cfg, []impl{newGoMake()}, path); err != nil {
		t.Errorf("replay without a failure: %v", err)
	}
}
