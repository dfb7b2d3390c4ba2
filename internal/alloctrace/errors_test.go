package alloctrace

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadErrorsSayTheCause: a record cut short wraps io.ErrUnexpectedEOF (not io.EOF, which
// means a trace that ended cleanly) besides ErrFormat, and a value out of range says so
// without a trailing "<nil>" cause.
func TestReadErrorsSayTheCause(t *testing.T) {
	for name, in := range map[string]string{
		"dt cut":        "\x01",
		"size cut":      "\x01\x00",
		"align cut":     "\x01\x00\x08",
		"goroutine cut": "\x01\x00\x08\x03",
		"free id cut":   "\x01\x00\x08\x03\x01\x02\x00",
		"varint cut":    "\x01\x00\x80",
	} {
		_, err := Read(strings.NewReader(Magic + in))
		cut := errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF)
		if !errors.Is(err, ErrFormat) || !cut {
			t.Errorf("%s: %v, want ErrFormat and io.ErrUnexpectedEOF", name, err)
		}
	}
	for name, in := range map[string]string{
		"size 0":       "\x01\x00\x00\x00\x00",
		"align 2^60":   "\x01\x00\x08\x3c\x00",
		"free unknown": "\x02\x00\x05",
	} {
		_, err := Read(strings.NewReader(Magic + in))
		if !errors.Is(err, ErrFormat) || strings.Contains(err.Error(), "<nil>") {
			t.Errorf("%s: %v, want ErrFormat without a nil cause", name, err)
		}
	}
}
