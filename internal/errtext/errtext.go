// Package errtext builds the errors the adapters return when they wrap another error: the
// text is one line with one package prefix, and the error still matches what it wraps.
//
// The core's sentinels carry their own prefix ("fencing: not acquired"), and errors.Join
// puts each joined error on a line of its own. Wrapped with fmt.Errorf, they read
// "asynqfence: task \"t\": fencing: not acquired\ncontext deadline exceeded". Wrapped with
// [New], the same error reads "asynqfence: task \"t\": not acquired: context deadline
// exceeded" and matches fencing.ErrNotAcquired and context.DeadlineExceeded as before.
package errtext

import "strings"

// packages are the package prefixes ("fencing: ") dropped from wrapped errors' texts.
var packages = map[string]bool{"fencing": true, "fencemw": true, "asynqfence": true, "store": true}

// Error is an error with a one-line text that matches each error it wraps.
type Error struct {
	text string
	errs []error
}

// New returns an error reading prefix + msg, then ": " and the text of each non-nil error
// in errs, with line breaks replaced by ": " and the package prefixes at the start of each
// line and after each ": " dropped. errors.Is and errors.As see every error in errs.
func New(prefix, msg string, errs ...error) error {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(msg)
	kept := make([]error, 0, len(errs))
	for _, err := range errs {
		if err == nil {
			continue
		}
		kept = append(kept, err)
		for _, line := range strings.Split(err.Error(), "\n") {
			if line == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteString(": ")
			}
			b.WriteString(Strip(line))
		}
	}
	return &Error{text: b.String(), errs: kept}
}

// Strip drops the package prefixes ("fencing: ") from s: at its start and after each ": ".
func Strip(s string) string {
	parts := strings.Split(s, ": ")
	out := parts[:0]
	for i, p := range parts {
		if packages[p] && i < len(parts)-1 {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

func (e *Error) Error() string { return e.text }

// Unwrap returns the wrapped errors, for errors.Is and errors.As.
func (e *Error) Unwrap() []error { return e.errs }
