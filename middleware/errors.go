package middleware

import (
	"errors"

	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/labstack/echo/v4"
)

// NewHTTPError returns an *echo.HTTPError with status code, the status text as its message
// and err as its internal error. Echo's DefaultHTTPErrorHandler answers it with the body
// {"message":"<status text>"} and nothing else, even when e.Debug is true (it otherwise adds
// err.Error(), which would show resource names and Redis addresses): the message is a
// json.Marshaler, which Echo sends as it is. err stays available to logs, errors.Is and
// errors.As through HTTPError.Internal and Unwrap. Return the result as it is: Echo
// recognises an HTTPError by a type assertion, so a wrapped one becomes a 500.
func NewHTTPError(code int, err error) *echo.HTTPError {
	return NewHTTPErrorMessage(code, "", err)
}

// NewHTTPErrorMessage is [NewHTTPError] with a message of your own for the client, such as
// "payout 42 is being processed": the body is {"message":"<message>"} ("" gives the status
// text), and err still stays out of it.
func NewHTTPErrorMessage(code int, message string, err error) *echo.HTTPError {
	return &echo.HTTPError{Code: code, Message: echofence.Public{Status: code, Message: message}, Internal: err}
}

// DefaultErrorHandler is the default [Config.ErrorHandler]. It returns an *echo.HTTPError
// found in err's chain as it is (a KeyExtractor may return one), a 500 [NewHTTPError] when the
// Locker refused the call's options (a TTL above its counter expiry, say: the server's
// configuration), a 400 one when err matches [fencing.ErrInvalid] otherwise (the request has
// no valid key), and a 503 one for the rest (Redis unreachable, Locker closed).
func DefaultErrorHandler(c echo.Context, err error) error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he
	}
	return NewHTTPError(echofence.ErrorStatus(err), err)
}

// DefaultDenyHandler is the default [Config.DenyHandler]: a 423 Locked error whose body
// names the busy resource as the middleware locks it, {"message":"order:42 is busy"} (the
// lock's name, never its Redis key, holder or token), with err as its internal error. To
// answer 409 Conflict with a message of your own instead, use
//
//	func(c echo.Context, _ string, err error) error {
//		return fencemw.NewHTTPErrorMessage(http.StatusConflict, "payout "+c.Param("id")+" is being processed", err)
//	}
func DefaultDenyHandler(c echo.Context, resource string, err error) error {
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
//	func(c echo.Context, _ string, err error) error {
//		return fencemw.NewHTTPErrorMessage(http.StatusConflict, "order "+c.Param("id")+" changed meanwhile", err)
//	}
func DefaultLostHandler(c echo.Context, resource string, err error) error {
	return NewHTTPErrorMessage(echofence.LostStatus, echofence.LostMessage(resource), err)
}

// problemError returns the answer of the default idempotency error handler: an
// *echo.HTTPError whose body is an RFC 9457 problem document, with its Content-Type set on
// the response (Echo's handlers keep a Content-Type already set).
func problemError(c echo.Context, p echofence.Public, err error) error {
	c.Response().Header().Set(echo.HeaderContentType, echofence.ContentTypeProblem)
	return &echo.HTTPError{Code: p.Status, Message: p, Internal: err}
}
