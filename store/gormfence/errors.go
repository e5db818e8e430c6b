package gormfence

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/store"
)

// ErrNoToken reports a write of a fenced model under a context that carries no
// fencing token for it: no [fencing.TokenFromContext], or, for a model with a
// FenceResource method, no [fencing.TokenFor] of its resource. The write is not run.
// A plugin built with [AllowUnfenced] writes such models unfenced instead.
var ErrNoToken = errors.New("gormfence: no fencing token in the context")

// invalidError is an error of invalid input: its text says what was wrong, and it
// matches store.ErrInvalid, as package store's errors of invalid input do.
type invalidError string

func (e invalidError) Error() string { return string(e) }

// Is reports whether target is store.ErrInvalid.
func (e invalidError) Is(target error) bool { return target == store.ErrInvalid }

// invalid returns an error of invalid input whose text is fmt.Sprintf(format, args...).
func invalid(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}
