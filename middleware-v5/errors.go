package middleware

import (
	"encoding/json"
	"errors"
	"net/http"
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
	return &httpError{code: code, err: err}
}

// DefaultErrorHandler is the default [Config.ErrorHandler]. It returns an error carrying an
// HTTP status (an echo.HTTPStatusCoder, such as echo.ErrNotFound or an *echo.HTTPError) found
// in err's chain as it is (a KeyExtractor may return one), a 500 [NewHTTPError] when the
// Locker refused the call's options (a TTL above its counter expiry, say: the server's
// configuration), a 400 one when err matches [fencing.ErrInvalid] otherwise (the request has
// no valid key), and a 503 one for the rest (Redis unreachable, Locker closed).
func DefaultErrorHandler(c *echo.Context, err error) error {
	var coded interface {
		error
		StatusCode() int
	}
	if errors.As(err, &coded) && coded.StatusCode() != 0 {
		return coded
	}
	return NewHTTPError(echofence.ErrorStatus(err), err)
}

// DefaultDenyHandler is the default [Config.DenyHandler]: a 423 Locked [NewHTTPError] with
// err as its cause. To answer 409 Conflict instead, use
//
//	func(c *echo.Context, _ string, err error) error {
//		return fencemw.NewHTTPError(http.StatusConflict, err)
//	}
func DefaultDenyHandler(c *echo.Context, resource string, err error) error {
	return NewHTTPError(echofence.DenyStatus, err)
}

// httpError is the error [NewHTTPError] returns.
type httpError struct {
	code int
	err  error
}

// StatusCode returns the HTTP status, for echo.HTTPStatusCoder.
func (e *httpError) StatusCode() int { return e.code }

// Error reads "code=<code>, message=<status text>, err=<cause>", as an *echo.HTTPError does.
func (e *httpError) Error() string {
	s := "code=" + strconv.Itoa(e.code) + ", message=" + http.StatusText(e.code)
	if e.err != nil {
		s += ", err=" + e.err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *httpError) Unwrap() error { return e.err }

// MarshalJSON returns {"message":"<status text>"}: the body Echo's DefaultHTTPErrorHandler
// sends for an error that marshals itself.
func (e *httpError) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Message string `json:"message"`
	}{http.StatusText(e.code)})
}

// ProblemError returns the RFC 9457 problem Echo's ProblemDetailsHTTPErrorHandler sends: the
// status only, so the title is its text and there is no detail.
func (e *httpError) ProblemError() *echo.ProblemError {
	return &echo.ProblemError{Status: e.code}
}
