package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestUCXStepFailureRecorded checks that a step of -ucx that fails (a transport missing, a
// peer's error) is recorded, said once with its reason in the table and in the JSON, that the
// steps after it still run, and that the run then exits 1. A failing step aborted the run: no
// table and no JSON, the other steps' figures lost.
func TestUCXStepFailureRecorded(t *testing.T) {
	errNoShm := errors.New("no shared memory transport")
	var ran []string
	measure := func(c string) func(context.Context) ([]ucxRow, error) {
		return func(context.Context) ([]ucxRow, error) {
			ran = append(ran, c)
			return []ucxRow{{Case: c, Remote: 100, Other: 50, Ratio: 2}}, nil
		}
	}
	steps := []ucxStep{
		{cases: []string{"registration/1000x16KiB"}, run: measure("registration/1000x16KiB")},
		{cases: []string{"put/4KiB", "get/4KiB"}, run: func(context.Context) ([]ucxRow, error) {
			ran = append(ran, "put/4KiB")
			return nil, errNoShm
		}},
		{cases: []string{"put/16KiB", "get/16KiB"}, run: measure("put/16KiB")},
		{cases: []string{"cpu/1000x16KiB-vs-net"}, run: measure("cpu/1000x16KiB-vs-net")},
	}
	rows, failed := runUCXSteps(context.Background(), regexp.MustCompile("registration|put/"), steps,
		time.Minute)
	if want := []string{"registration/1000x16KiB", "put/4KiB", "put/16KiB"}; !slices.Equal(ran, want) {
		t.Errorf("steps run: %q, want %q (those -cases selects, on after the failure)", ran, want)
	}
	if want := []string{"put/4KiB"}; !slices.Equal(failed, want) {
		t.Errorf("failed steps: %q, want %q (the cases -cases selected of the failed step)", failed, want)
	}
	if len(rows) != 3 || rows[1].Case != "put/4KiB" || rows[1].Error != errNoShm.Error() ||
		rows[0].Error != "" || rows[2].Error != "" {
		t.Fatalf("rows %+v, want registration, the failed put/4KiB with its error, put/16KiB", rows)
	}

	cfg := &config{out: t.TempDir(), name: "n"}
	var out, errOut bytes.Buffer
	if got := finishUCX(&out, &errOut, cfg, "UCX_TLS=sm", rows, failed); got != 1 {
		t.Errorf("exit status %d with a failed step, want 1", got)
	}
	if n := strings.Count(out.String(), errNoShm.Error()); n != 1 ||
		!strings.Contains(out.String(), "| put/4KiB | failed: "+errNoShm.Error()+" |") {
		t.Errorf("the table says the failure %d times, want once in put/4KiB's row:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "| put/16KiB | 100 |") {
		t.Errorf("the table lost the rows measured after the failure:\n%s", out.String())
	}
	e := errOut.String()
	if !strings.Contains(e, "put/4KiB") || strings.Contains(e, errNoShm.Error()) {
		t.Errorf("stderr should name the failed step, its reason left to the table and the JSON: %q", e)
	}
	data, err := os.ReadFile(cfg.out + "/ucx-n.json")
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(data, &js); err != nil || len(js.Rows) != 3 {
		t.Fatalf("the JSON: %v, %d rows, want 3", err, len(js.Rows))
	}
	if js.Rows[1]["error"] != errNoShm.Error() || js.Rows[1]["remote"] != nil {
		t.Errorf("the failed row in the JSON: %v, want its error and no figures", js.Rows[1])
	}
	if js.Rows[2]["remote"] != 100.0 {
		t.Errorf("the row after the failure in the JSON: %v", js.Rows[2])
	}

	out.Reset()
	errOut.Reset()
	if got := finishUCX(&out, &errOut, cfg, "UCX_TLS=tcp", rows[:1], nil); got != 0 {
		t.Errorf("exit status %d without a failure, want 0 (stderr %q)", got, errOut.String())
	}
}
