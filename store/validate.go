package store

import (
	"fmt"
	"reflect"

	"github.com/fencekit/fencekit/fencing"
)

// checkToken returns an error unless token is a valid fencing token. Tokens start at 1:
// 0 is both Go's zero value and the SQL column's default mark, so a forgotten token
// would otherwise pass every check on a fresh record.
func checkToken(op, resource string, token int64) error {
	if token < 1 {
		return invalid("store: %s %q: invalid fencing token %d: tokens start at 1", op, resource, token)
	}
	return nil
}

// isNil reports whether v is nil or an interface holding a nil pointer, such as a
// (*redis.Client)(nil) passed as a redis.Scripter, whose methods would panic.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// invalidError is an error of invalid input: its text says what was wrong, and it
// matches ErrInvalid.
type invalidError string

func (e invalidError) Error() string { return string(e) }

// Is reports whether target is ErrInvalid or fencing.ErrInvalid.
func (e invalidError) Is(target error) bool {
	return target == ErrInvalid || target == fencing.ErrInvalid
}

// invalid returns an error of invalid input whose text is fmt.Sprintf(format, args...).
func invalid(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}
