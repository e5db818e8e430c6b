package store

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fencing"
)

var (
	// ErrStaleToken reports that a write carried a fencing token below the resource's
	// high-water mark, so a newer holder has already written and the write was refused.
	// Every check in this package returns an error matching it with [errors.Is]; the
	// error is a [*StaleTokenError] when the caller wants the tokens.
	ErrStaleToken = errors.New("store: stale fencing token")

	// ErrNotFound reports that the record to read or update does not exist. A
	// conditional SQL update that matched no row because the row is missing returns
	// it instead of [ErrStaleToken].
	ErrNotFound = errors.New("store: record not found")

	// ErrInvalid reports an argument that a call cannot use: an empty table, column,
	// key or resource name, a nil DB, client, id or function, a token below 1, the zero
	// value or a nil pointer of a type that needs its constructor. Every error of
	// invalid input in this package matches it with [errors.Is]; its text says what
	// was wrong, such as `store: check "fences/order:7": invalid fencing token 0: tokens
	// start at 1`. Nothing was run or written. It matches [fencing.ErrInvalid] too, so
	// that one check covers the invalid input of the lock and of the store.
	ErrInvalid error = invalidArgument{}
)

// invalidArgument is ErrInvalid's type: an error that also matches fencing.ErrInvalid.
type invalidArgument struct{}

func (invalidArgument) Error() string { return "store: invalid argument" }

func (invalidArgument) Is(target error) bool { return target == fencing.ErrInvalid }

// notFoundError is the cause of a missing record inside the error of the operation that
// read it, which names the record after the prefix: `store: mark "fences/order:7": no fence
// row`. It says what was missing without the text of ErrNotFound, which carries the prefix
// too, and matches ErrNotFound.
type notFoundError string

func (e notFoundError) Error() string { return string(e) }

// Is reports whether target is [ErrNotFound].
func (e notFoundError) Is(target error) bool { return target == ErrNotFound }

// StaleTokenError is the error a check returns when it refuses a stale token. It
// matches [ErrStaleToken] with [errors.Is]; use [errors.As] to read the tokens.
type StaleTokenError struct {
	// Resource names what was guarded: the Memory resource, the Redis key, or
	// "table/id" for SQL.
	Resource string
	// Token is the token that was refused.
	Token int64
	// Mark is the high-water mark seen when the token was refused; it is always
	// greater than Token. A newer writer may have raised it since.
	Mark int64
}

// Error returns a message such as
// `store: stale fencing token 5 for "order:7" (high-water mark 9)`; for a nil
// *StaleTokenError, the text of [ErrStaleToken].
func (e *StaleTokenError) Error() string {
	if e == nil {
		return ErrStaleToken.Error()
	}
	return fmt.Sprintf("%v %d for %q (high-water mark %d)", ErrStaleToken, e.Token, e.Resource, e.Mark)
}

// Is reports whether target is [ErrStaleToken].
func (e *StaleTokenError) Is(target error) bool {
	return target == ErrStaleToken
}
