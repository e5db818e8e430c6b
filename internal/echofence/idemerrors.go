package echofence

import (
	"errors"
	"net/http"
)

// The idempotency middleware's own sentinels; the adapters export them. Its other errors
// match fencing's: a missing or invalid key fencing.ErrInvalid (400), a key whose request
// is still running fencing.ErrNotAcquired (409).
var (
	// ErrKeyReused means the key was used before with another request: another method,
	// route, path values or body (another fingerprint). Answered 422.
	ErrKeyReused = errors.New("fencemw: Idempotency-Key reused with another request")
	// ErrBodyTooLarge means the request's body is larger than MaxBody. Answered 413.
	ErrBodyTooLarge = errors.New("fencemw: request body too large")
)

// errCorrupt marks a stored result that cannot be read (another version of the record, or
// a key written by someone else). Answered 500.
var errCorrupt = errors.New("stored result unreadable")

// idemError is an error the idempotency middleware passes to its ErrorHandler, with the
// answer the default handler gives: a status and a detail written for the client.
type idemError struct {
	public Public
	err    error
}

func (e *idemError) Error() string { return e.err.Error() }
func (e *idemError) Unwrap() error { return e.err }

// idemErr returns err, answered with status and detail; its text is err's.
func idemErr(status int, detail string, err error) error {
	return &idemError{public: Public{Status: status, Message: detail, Problem: true}, err: err}
}

// keyErr returns the 400 of an invalid key, reading "fencemw: <message>": it matches
// fencing.ErrInvalid.
func keyErr(detail, format string, args ...any) error {
	return idemErr(http.StatusBadRequest, detail, invalidf(format, args...))
}

// IdempotencyAnswer returns the problem the default idempotency error handler answers err
// with: the status and detail of the middleware's own errors, 500 for the Locker's settings
// and unreadable records, and 503 for the rest (Redis unreachable, Locker closed).
func IdempotencyAnswer(err error) Public {
	var e *idemError
	if errors.As(err, &e) {
		return e.public
	}
	status := ErrorStatus(err)
	if status == http.StatusBadRequest {
		status = http.StatusInternalServerError // no request error comes without an idemError
	}
	return Public{Status: status, Problem: true}
}
