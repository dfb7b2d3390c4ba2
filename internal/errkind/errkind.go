// Package errkind makes the module's package sentinels: errors with a text of their own that
// match a kind of package pinmalloc under errors.Is (pinned.ErrClosed is New(pinmalloc.ErrClosed,
// "pinned: pool closed")), and the wrap that gives a cause from a lower layer one of them
// without saying the same thing twice.
package errkind

import (
	"fmt"
	"strings"
)

// New returns an error whose text is text and which matches kind under errors.Is (it unwraps
// to kind).
func New(kind error, text string) error { return &kindError{text: text, kind: kind} }

// kindError is an error of New.
type kindError struct {
	text string
	kind error
}

func (e *kindError) Error() string { return e.text }

// Unwrap returns the error's kind.
func (e *kindError) Unwrap() error { return e.kind }

// Wrap returns an error that matches both sentinel and err under errors.Is, for err, an error
// of a lower layer that wraps cause (a sentinel of that layer of the same meaning). Its text is
// sentinel's, then err's without cause's text, which sentinel says already: "pinned: double
// free: 0x7f00" for sentinel pinned.ErrDoubleFree and err "heap: double free: 0x7f00", not
// "pinned: double free: heap: double free: 0x7f00".
func Wrap(sentinel, err, cause error) error {
	rest := err.Error()
	if c := cause.Error(); c != "" {
		if i := strings.Index(rest, c); i >= 0 {
			after := rest[i+len(c):]
			if after == "" || strings.HasPrefix(after, ": ") {
				rest = rest[:i] + strings.TrimPrefix(after, ": ")
			}
		}
	}
	rest = strings.TrimSuffix(rest, ": ")
	text := sentinel.Error()
	if rest != "" {
		text += ": " + rest
	}
	return &wrapped{text: text, errs: []error{sentinel, err}}
}

// wrapped is an error of Wrap.
type wrapped struct {
	text string
	errs []error
}

func (e *wrapped) Error() string { return e.text }

// Unwrap returns the errors it wraps: a sentinel (Wrap, Also) or a head (Wrapf), then the error.
func (e *wrapped) Unwrap() []error { return e.errs }

// Also returns err made to match sentinel too under errors.Is, for an error whose cause
// (a lower layer's, such as the driver's sticky fault) calls for sentinel as well. An error
// whose text starts with prefix (it names the package of sentinel already, "device: ") keeps
// its text; another is said after sentinel's: "device: the device faulted: cuda: ...", not
// "device: the device faulted: device: ...".
func Also(sentinel, err error, prefix string) error {
	text := err.Error()
	if !strings.HasPrefix(text, prefix) {
		text = sentinel.Error() + ": " + text
	}
	return &wrapped{text: text, errs: []error{sentinel, err}}
}

// Wrapf returns an error that says what format and args say, then err, and matches both under
// errors.Is: what format's %w wraps (a sentinel of the package, say) and err. Its text names
// the package once: format's starts with prefix ("device: ", or with a sentinel that does),
// and an err of the package's own, whose text starts so too, follows without it: "device:
// forget stream 0x10: the synchronize of the context ...", not "... 0x10: device: the ...".
func Wrapf(prefix string, err error, format string, args ...any) error {
	head := fmt.Errorf(format, args...)
	return &wrapped{text: head.Error() + ": " + strings.TrimPrefix(err.Error(), prefix),
		errs: []error{head, err}}
}
