package middleware

import (
	"errors"
	"strconv"

	"github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/internal/echofence"
)

// NewHTTPError returns an error with HTTP status code and err as its cause, for a
// DenyHandler or ErrorHandler to return. Echo v5 finds its status as it finds any error's
// (echo.StatusCode(err), echo.ResolveResponseStatus), and errors.Is and errors.As see err
// through Unwrap. It answers for itself what a client sees: Echo's DefaultHTTPErrorHandler
// sends {"message":"<status text>"} and ProblemDetailsHTTPErrorHandler a problem with only
// the status and its text, even when they are told to expose errors (the cause's text would
// show resource names and Redis addresses). Like Echo v5's own errors (echo.ErrNotFound, say),
// it is not an *echo.HTTPError: match it with echo.StatusCode, not a type assertion.
// Its text, for logs, reads like an *echo.HTTPError's: "code=423, message=Locked, err=…".
func NewHTTPError(code int, err error) error {
	return NewHTTPErrorMessage(code, "", err)
}

// NewHTTPErrorMessage is [NewHTTPError] with a message of your own for the client, such as
// "payout 42 is being processed": DefaultHTTPErrorHandler sends {"message":"<message>"} and
// ProblemDetailsHTTPErrorHandler a problem with the message as its detail ("" gives the
// status text and no detail), and err still stays out of both.
func NewHTTPErrorMessage(code int, message string, err error) error {
	return &httpError{public: echofence.Public{Status: code, Message: message}, err: err}
}

// DefaultErrorHandler is the default [Config.ErrorHandler]. It returns an error carrying an
// HTTP status (an echo.HTTPStatusCoder, such as echo.ErrNotFound or an *echo.HTTPError) found
// in err's chain as it is (a KeyExtractor may return one), a 500 [NewHTTPError] when the
// Locker refused the call's options (a TTL above its counter expiry, say: the server's
// configuration), a 400 one when err matches [fencing.ErrInvalid] otherwise (the request has
// no valid key), and a 503 one for the rest (Redis unreachable, Locker closed).
func DefaultErrorHandler(c *echo.Context, err error) error {
	if coded := statusError(err); coded != nil {
		return coded
	}
	return NewHTTPError(echofence.ErrorStatus(err), err)
}

// statusError returns the first error in err's chain that carries an HTTP status (an
// echo.HTTPStatusCoder with a status), or nil.
func statusError(err error) error {
	var coded interface {
		error
		StatusCode() int
	}
	if errors.As(err, &coded) && coded.StatusCode() != 0 {
		return coded
	}
	return nil
}

// DefaultDenyHandler is the default [Config.DenyHandler]: a 423 Locked error whose message
// names the busy resource as the middleware locks it, "order:42 is busy" (the lock's name,
// never its Redis key, holder or token), with err as its cause. To answer 409 Conflict with
// a message of your own instead, use
//
//	func(c *echo.Context, _ string, err error) error {
//		return fencemw.NewHTTPErrorMessage(http.StatusConflict, "payout "+c.Param("id")+" is being processed", err)
//	}
func DefaultDenyHandler(c *echo.Context, resource string, err error) error {
	return NewHTTPErrorMessage(echofence.DenyStatus, echofence.DenyMessage(resource), err)
}

// DefaultLostHandler is the default [Config.LostHandler], for a handler whose error says it
// lost the lock while it ran (it matches store.ErrStaleToken or [fencing.ErrNotHeld]): a 503
// Service Unavailable error whose message names the resource as the middleware locks it,
// {"message":"the lock on order:42 was lost while the request ran"}, with the handler's error
// as its cause, for logs and errors.Is. Retry-After is set (1 second) before it is called. A
// 5xx, it is not kept by the [Idempotent] middleware in front, so a retry with the same key
// runs again. To answer 409 Conflict instead, use
//
//	func(c *echo.Context, _ string, err error) error {
//		return fencemw.NewHTTPErrorMessage(http.StatusConflict, "order "+c.Param("id")+" changed meanwhile", err)
//	}
func DefaultLostHandler(c *echo.Context, resource string, err error) error {
	return NewHTTPErrorMessage(echofence.LostStatus, echofence.LostMessage(resource), err)
}

// problemError returns the answer of the default idempotency error handler: an error whose
// body is an RFC 9457 problem document under both of Echo's error handlers, with its
// Content-Type set on the response (Echo's handlers keep a Content-Type already set).
func problemError(c *echo.Context, p echofence.Public, err error) error {
	c.Response().Header().Set(echo.HeaderContentType, echofence.ContentTypeProblem)
	return &httpError{public: p, err: err}
}

// httpError is the error [NewHTTPError] returns.
type httpError struct {
	public echofence.Public
	err    error
}

// StatusCode returns the HTTP status, for echo.HTTPStatusCoder.
func (e *httpError) StatusCode() int { return e.public.Status }

// Error reads "code=<code>, message=<message>, err=<cause>", as an *echo.HTTPError does.
func (e *httpError) Error() string {
	s := "code=" + strconv.Itoa(e.public.Status) + ", message=" + e.public.Text()
	if e.err != nil {
		s += ", err=" + e.err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *httpError) Unwrap() error { return e.err }

// MarshalJSON returns the body Echo's DefaultHTTPErrorHandler sends for an error that
// marshals itself: {"message":"<message>"}, or the problem document of an idempotency error.
func (e *httpError) MarshalJSON() ([]byte, error) { return e.public.MarshalJSON() }

// ProblemError returns the RFC 9457 problem Echo's ProblemDetailsHTTPErrorHandler sends: the
// status, its text as the title, and the message, if any, as the detail.
func (e *httpError) ProblemError() *echo.ProblemError {
	return &echo.ProblemError{Status: e.public.Status, Detail: e.public.Message}
}
