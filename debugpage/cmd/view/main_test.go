package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/debugpage"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestView saves a snapshot of a live page and serves it: the page names the pool.
func TestView(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, _ := p.Alloc(1 << 20)
	defer p.Free(b)
	dp := debugpage.New()
	dp.AddPool("staging", p)
	live := httptest.NewServer(dp)
	defer live.Close()
	resp, err := http.Get(live.URL + "/stats.json?download=1")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	file := filepath.Join(t.TempDir(), "snapshot.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	done := make(chan error, 1)
	srvc := make(chan *http.Server, 1)
	go func() { done <- run([]string{"-addr", "127.0.0.1:0", file}, &out, func(s *http.Server) { srvc <- s }) }()
	var srv *http.Server
	select {
	case srv = <-srvc:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	addr := regexp.MustCompile(`http://[0-9.:]+/`).FindString(out.String())
	page, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(body), "<h2>staging (pinned)</h2>") || !strings.Contains(string(body), "read from a file") {
		t.Errorf("the page served:\n%.2000s", body)
	}
	srv.Close()
	if err := <-done; err != nil {
		t.Errorf("run after Close: %v", err)
	}

	if err := run([]string{"-h"}, io.Discard, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run -h: %v, want the usage (flag.ErrHelp)", err)
	}
	for _, args := range [][]string{{}, {"a", "b"}, {filepath.Join(t.TempDir(), "none.json")}} {
		if err := run(args, io.Discard, nil); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
}
