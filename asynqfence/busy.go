package asynqfence

import "errors"

// busyError is the error of a task whose resource another owner holds: the core's, its text
// as it is, marked so that IsBusy tells it from a handler's own.
type busyError struct {
	err error // the core's: matches fencing.ErrNotAcquired, carries fencing.RetryAfter
}

func (e *busyError) Error() string { return e.err.Error() }

func (e *busyError) Unwrap() error { return e.err }

// IsBusy reports whether err is, or wraps, the error a wrapped handler returns when the
// task's resource is held by another owner and the handler did not run. It is false for nil,
// for errors the handler itself returned, and for a lost lock. Use it to keep busy tasks out
// of an ErrorHandler's reports; [IsFailure] and [RetryDelay] use it.
func IsBusy(err error) bool {
	var b *busyError
	return errors.As(err, &b)
}
