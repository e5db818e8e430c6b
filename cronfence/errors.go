package cronfence

import (
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
)

// prefix starts the text of every error cronfence makes itself.
const prefix = "cronfence: "

// An ownError is an error cronfence makes itself: its text is the prefix and what it says,
// once, followed by the text of cause when there is one (robfig/cron's, never an error of
// another fencekit package). It matches cause and each error of is (fencing.ErrInvalid,
// leader.ErrNotLeader), whose texts it does not repeat.
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

// invalid returns an error reading "cronfence: <what>" that matches fencing.ErrInvalid.
func invalid(what string) error {
	return &ownError{msg: what, is: []error{fencing.ErrInvalid}}
}

// errTermChanged is the reason to skip a run when the term ended between IsLeader and Token.
var errTermChanged = &ownError{msg: "leadership changed as the run began", is: []error{leader.ErrNotLeader}}
