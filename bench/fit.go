package main

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"
)

// defaultWidth is the widest line the suite prints unless -wide is given: a terminal's, and a
// newcomer's reading width.
const defaultWidth = 120

// fitWriter passes text through, keeping every line within width columns: a markdown table
// wider than that is cut into tables of fewer columns, each starting with the first column;
// another line is wrapped at spaces, its continuation indented under it. A width of 0 passes
// everything as it is (-wide). Lines are written as they complete; a table when it ends (the
// first line after it, or Flush).
type fitWriter struct {
	w       io.Writer
	width   int
	pending []byte   // the line not yet ended
	table   []string // the table's lines so far
}

func newFitWriter(w io.Writer, width int) *fitWriter { return &fitWriter{w: w, width: width} }

func (f *fitWriter) Write(p []byte) (int, error) {
	f.pending = append(f.pending, p...)
	for {
		i := bytes.IndexByte(f.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(f.pending[:i])
		f.pending = f.pending[i+1:]
		if err := f.line(line); err != nil {
			return len(p), err
		}
	}
}

// Flush writes what is held: the line not ended and the table under way.
func (f *fitWriter) Flush() error {
	if len(f.pending) > 0 {
		line := string(f.pending)
		f.pending = nil
		if err := f.line(line); err != nil {
			return err
		}
	}
	return f.endTable()
}

func (f *fitWriter) line(l string) error {
	if strings.HasPrefix(strings.TrimSpace(l), "|") {
		f.table = append(f.table, l)
		return nil
	}
	if err := f.endTable(); err != nil {
		return err
	}
	_, err := io.WriteString(f.w, strings.Join(wrapLine(l, f.width), "\n")+"\n")
	return err
}

func (f *fitWriter) endTable() error {
	if len(f.table) == 0 {
		return nil
	}
	rows := f.table
	f.table = nil
	_, err := io.WriteString(f.w, strings.Join(splitTable(rows, f.width), "\n")+"\n")
	return err
}

// columns is a line's display width.
func columns(s string) int { return utf8.RuneCountInString(s) }

// wrapLine breaks l at spaces (after a comma or a semicolon where it can) into lines of at most
// width columns; the lines after the first
// are indented four columns past l's own indentation (at most 12). A word longer than a line
// stays whole.
func wrapLine(l string, width int) []string {
	if width <= 0 || columns(l) <= width {
		return []string{l}
	}
	lead := len(l) - len(strings.TrimLeft(l, " "))
	indent := strings.Repeat(" ", min(lead+4, 12))
	var out []string
	for columns(l) > width {
		// The last space that leaves at most width columns before it, past the indentation;
		// the last after a comma or a semicolon rather, where one leaves half the line or more,
		// so that "112.0 ns" stays whole in a list.
		cut, clause, n := -1, -1, 0
		for i, r := range l {
			if n > width {
				break
			}
			if r == ' ' && i > lead {
				cut = i
				if c := l[i-1]; (c == ',' || c == ';') && n >= width/2 {
					clause = i
				}
			}
			n++
		}
		if clause > 0 {
			cut = clause
		}
		if cut < 0 { // one word longer than the line: break after it
			cut = strings.IndexByte(l[lead:], ' ')
			if cut < 0 {
				break
			}
			cut += lead
		}
		out = append(out, strings.TrimRight(l[:cut], " "))
		l, lead = indent+strings.TrimLeft(l[cut:], " "), len(indent)
	}
	return append(out, l)
}

// splitTable returns a markdown table's rows as they are when every row fits in width columns,
// else as several tables (a blank line between), each with the first column and as many of the
// next as fit.
func splitTable(rows []string, width int) []string {
	fits := true
	for _, r := range rows {
		fits = fits && columns(r) <= width
	}
	if width <= 0 || fits {
		return rows
	}
	cells := make([][]string, len(rows))
	ncol := 0
	for i, r := range rows {
		r = strings.TrimSpace(r)
		r = strings.TrimSuffix(strings.TrimPrefix(r, "|"), "|")
		cells[i] = strings.Split(r, "|")
		ncol = max(ncol, len(cells[i]))
	}
	colWidth := make([]int, ncol) // the widest cell of each column, with its bar
	for _, row := range cells {
		for j, c := range row {
			colWidth[j] = max(colWidth[j], columns(c)+1)
		}
	}
	var out []string
	for j := 1; j < ncol; {
		k, w := j, 1+colWidth[0]
		for k < ncol && (k == j || w+colWidth[k] <= width) {
			w += colWidth[k]
			k++
		}
		if len(out) > 0 {
			out = append(out, "")
		}
		for _, row := range cells {
			parts := []string{cell(row, 0)}
			for c := j; c < k; c++ {
				parts = append(parts, cell(row, c))
			}
			out = append(out, "|"+strings.Join(parts, "|")+"|")
		}
		j = k
	}
	return out
}

func cell(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}
