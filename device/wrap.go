package device

import (
	"fmt"
	"strings"
)

// wrapf returns an error that says what format and args say, then err, and matches both under
// errors.Is: what format's %w wraps (a sentinel of this package, say) and err. Its text names
// this package once: format's starts "device: " (or with a sentinel that does), and an err of
// this package's own, whose text starts so too, follows without it: "device: forget stream
// 0x10: the synchronize of the context ...", not "... 0x10: device: the synchronize ...".
func wrapf(err error, format string, args ...any) error {
	head := fmt.Errorf(format, args...)
	return &wrapError{text: head.Error() + ": " + strings.TrimPrefix(err.Error(), "device: "),
		errs: []error{head, err}}
}

// wrapError is an error of wrapf.
type wrapError struct {
	text string
	errs []error
}

func (e *wrapError) Error() string { return e.text }

// Unwrap returns what wrapf's format wraps, and the error it wraps.
func (e *wrapError) Unwrap() []error { return e.errs }
