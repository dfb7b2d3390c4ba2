package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUCXResultsWriteFailure checks that -ucx says so when it cannot write its JSON (main then
// exits 1): a folder it could not make, or a file it could not write, left no results and no
// word of it, and the run exited 0.
func TestUCXResultsWriteFailure(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeUCXResults(notDir, "n", "UCX_TLS=tcp", nil); err == nil {
		t.Error("writing into a regular file's path as a folder: no error")
	}
	path, err := writeUCXResults(dir, "n", "UCX_TLS=tcp", []ucxRow{{Case: "put/4KiB"}})
	if err != nil || path != filepath.Join(dir, "ucx-n.json") {
		t.Fatalf("writeUCXResults = %q, %v", path, err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) == 0 {
		t.Errorf("the JSON: %d bytes, %v", len(b), err)
	}
}
