package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestFitWriter: lines and tables come out within the width, nothing lost: a long line is
// wrapped at spaces (its inner spacing kept), a wide table cut into tables that each repeat
// the first column; at width 0 (-wide) everything passes as it is.
func TestFitWriter(t *testing.T) {
	var in strings.Builder
	in.WriteString("[ 1/27] pair/16B      " + strings.Repeat("pinmalloc-heap 24.5 ns, ", 12) + "(1.5s)\n\n")
	header := "| case |"
	sep := "|---|"
	row := "| pair/16B |"
	for i := range 9 {
		header += fmt.Sprintf(" allocator-%d |", i)
		sep += "---|"
		row += fmt.Sprintf(" %d.5 ns (1%d.2 ns) |", i, i)
	}
	in.WriteString(header + "\n" + sep + "\n" + row + "\n\nafter the table\nshort")

	var out bytes.Buffer
	f := newFitWriter(&out, 60)
	for _, chunk := range strings.SplitAfter(in.String(), " ") { // written in pieces
		f.Write([]byte(chunk))
	}
	f.Flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for _, l := range lines {
		if columns(l) > 60 {
			t.Errorf("line of %d columns: %q", columns(l), l)
		}
	}
	got := out.String()
	for _, l := range lines[1:] {
		if l == "" {
			break // the progress line's end
		}
		if l = strings.TrimSpace(l); !strings.HasPrefix(l, "pinmalloc-heap ") && l != "(1.5s)" {
			t.Errorf("a list item was cut (a list wraps after its commas): %q", l)
		}
	}
	if !strings.HasPrefix(got, "[ 1/27] pair/16B      pinmalloc-heap") || !strings.Contains(got, "\n    pinmalloc-heap") {
		t.Errorf("the progress line lost its spacing or its hanging indent:\n%s", got)
	}
	for i := range 9 {
		if !strings.Contains(got, fmt.Sprintf("allocator-%d", i)) || !strings.Contains(got, fmt.Sprintf("%d.5 ns (1%d.2 ns)", i, i)) {
			t.Errorf("column %d lost:\n%s", i, got)
		}
	}
	if n := strings.Count(got, "| case |"); n < 2 {
		t.Errorf("the table was not cut (%d headers):\n%s", n, got)
	}
	if strings.Count(got, "| pair/16B |") != strings.Count(got, "| case |") {
		t.Errorf("each cut table must repeat the first column:\n%s", got)
	}
	if !strings.HasSuffix(got, "after the table\nshort\n") {
		t.Errorf("the lines after the table:\n%s", got)
	}

	out.Reset()
	f = newFitWriter(&out, 0)
	f.Write([]byte(in.String()))
	f.Flush()
	if out.String() != in.String()+"\n" {
		t.Errorf("width 0 changed the text:\n%s", out.String())
	}
}

// TestOutputWidth runs the suite as a user would (one quick case) and checks that no line of
// what it prints is wider than 120 columns (TestFitWriter checks -wide's width 0).
func TestOutputWidth(t *testing.T) {
	dir := t.TempDir()
	code, out := runMain(t, nil, "-quick", "-cases", "^pair/16B$", "-out", dir)
	if code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, out)
	}
	for i, l := range strings.Split(out, "\n") {
		if columns(l) > defaultWidth {
			t.Errorf("line %d is %d columns wide: %q", i+1, columns(l), l)
		}
	}
	if !strings.Contains(out, "more not measured: their cases were not in this run") {
		t.Errorf("the targets this run did not measure are not summed up in one line:\n%s", out)
	}
}
