package asynqfence

import (
	"github.com/fencekit/fencekit/fencing"
)

// prefix starts the text of every error asynqfence makes itself.
const prefix = "asynqfence: "

// An ownError is an error asynqfence makes itself: its text is the prefix and what it says,
// once, followed by the text of cause when there is one (the error of a function of the
// user's, or of another library, never one of another fencekit package). It matches cause and
// each error of is (fencing.ErrInvalid, asynq.SkipRetry), whose texts it does not repeat.
type ownError struct {
	msg   string
	cause error
	is    []error
}

func (e *ownError) Error() string {
	if e.cause == nil {
		return prefix + e.msg
	}
	return prefix + e.msg + ": " + e.cause.Error()
}

// Unwrap returns cause and the errors of is, for errors.Is and errors.As.
func (e *ownError) Unwrap() []error {
	if e.cause == nil {
		return e.is
	}
	return append([]error{e.cause}, e.is...)
}

// lostError is the error of a handler whose write a fenced store refused: its text is the
// handler's, as it is, and it matches [fencing.ErrNotHeld] besides what the handler's error
// matches (see lost).
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }

// Unwrap returns the handler's error and fencing.ErrNotHeld.
func (e *lostError) Unwrap() []error { return []error{e.err, fencing.ErrNotHeld} }
