package middleware

import (
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

// IdempotencyConfig configures the idempotency middleware ([IdempotentWithConfig]): a
// request that carries an Idempotency-Key runs once, its result is stored under the key, and
// a retry with the same key gets that result again instead of running again. The zero value
// of every field but Locker selects its default. A config is only read; one value may build
// any number of middlewares.
//
// It implements echo.MiddlewareConfigurator. The package github.com/fencekit/fencekit/middleware
// has an IdempotencyConfig with the same fields for Echo v4; both convert to one internal
// type that holds the behaviour.
type IdempotencyConfig struct {
	// Skipper decides which requests run without the middleware. Default: the safe methods
	// (GET, HEAD, OPTIONS, TRACE and QUERY) are skipped, as [SkipSafeMethods] does; the key
	// is for requests that change something.
	Skipper middleware.Skipper

	// Locker takes the key's lock while the first request runs, and keeps the result beside
	// the lock, under its prefix. Required. A Locker whose [fencing.Locker.Err] is set is
	// refused by [IdempotencyConfig.ToMiddleware]. One built with [fencing.WithReplicas]
	// waits for its replicas at each acquisition; a request whose lock they did not
	// acknowledge runs nothing and is answered 503 ([fencing.ErrNotReplicated]).
	Locker *fencing.Locker

	// Header names the request header that carries the key: its value as it is, or a
	// Structured Field string ("...", as the IETF draft writes it) whose quotes are removed.
	// A key has 1 to 255 bytes without control characters; any other is answered 400, as
	// are several such headers. Default: "Idempotency-Key".
	Header string

	// Required answers 400 to a request without a key. When false, the default, such a
	// request runs as if the middleware were not there, and nothing is stored.
	Required bool

	// Scope returns the key space of a request, such as the authenticated client's id: the
	// same key in two scopes names two results, so clients cannot replay each other's. An
	// error answers the request through ErrorHandler (400 by default, or an error with its
	// own status, such as echo.ErrUnauthorized, as it is). Default: nil, one key space for
	// everybody.
	Scope func(c *echo.Context) (string, error)

	// Fingerprint returns what ties a key to its request: a retry whose fingerprint is not
	// the stored one is answered 422 (the key was reused for another request). An error is
	// handled as Scope's. Default: [DefaultFingerprint], the SHA-256 of the method, the route,
	// the path values and the body (not the query string or the headers).
	Fingerprint func(c *echo.Context) (string, error)

	// MaxBody bounds, in bytes, the request's body, which the middleware reads before the
	// handler (a larger one is answered 413), and the response's body that is stored (a
	// larger one is sent as the handler writes it and not stored, as is one the handler
	// flushes). Default: 1 MiB.
	MaxBody int64

	// Retention is how long a result is kept, from its commit; a retry after it runs the
	// handler again. It must be between [fencing.MinTTL] and [fencing.MaxTTL]. Default: 24h.
	Retention time.Duration

	// LockTTL is the lease of the key's lock, which the first request holds while it runs:
	// [fencing.Locker.Do] renews it every third of LockTTL, so it does not limit how long the
	// handler may run. It bounds how long a first attempt that stalls (a paused process, a
	// partition) keeps its retries answered 409 before one takes the key over, and it is how
	// long a pause or a Redis outage may last before that happens. It must be between
	// [fencing.MinTTL] and [fencing.MaxTTL], and not above the Locker's
	// [fencing.WithCounterExpiry]. Default: 10s, or the Locker's TTL when that is shorter.
	LockTTL time.Duration

	// MaxWait is how long a retry that arrives while the first request with its key runs
	// waits for it: it then gets the stored result (or runs, when none was stored). 0 answers
	// 409 Conflict with Retry-After at once, as does a wait that ends. It must not be
	// negative. Default: 0.
	MaxWait time.Duration

	// Keep says, from the status, which results are stored; a result not stored lets a retry
	// run the handler again. A handler's error that matches [fencing.ErrNotAcquired] (a busy
	// lock inside it, such as the Fence middleware's 423) is never stored, nor is the result
	// of a request whose lock was lost while it ran. Default: status < 500.
	Keep func(status int) bool

	// ReplayHeaders are the response headers stored with a result and replayed with it.
	// Default (nil): Content-Type, Content-Location and Location.
	ReplayHeaders []string

	// ErrorHandler builds the response when the request is neither run nor replayed: err
	// matches [fencing.ErrInvalid] for a missing (Required) or invalid key (400),
	// [ErrBodyTooLarge] (413), [fencing.ErrNotAcquired] while another request with the key
	// runs (409; Retry-After is set), [ErrKeyReused] for another request's key (422), and is
	// a Redis or Locker error otherwise (503, or 500 for the Locker's settings). Its result is
	// returned to Echo; nil ends the request (write a response first). Default:
	// [DefaultIdempotencyErrorHandler], RFC 9457 problem details.
	ErrorHandler func(c *echo.Context, err error) error

	// Label returns the label of the key's lock ([fencing.WithLabel]), as [Config.Label]
	// does, fitted the same way. Default: nil, the request's ID (X-Request-Id).
	Label func(c *echo.Context) string
}

// Errors of the idempotency middleware, besides [fencing.ErrInvalid] (a missing or invalid
// key) and [fencing.ErrNotAcquired] (the key's request is still running), for an
// [IdempotencyConfig.ErrorHandler] to tell apart with errors.Is.
var (
	// ErrKeyReused means the key was used before with another request (another
	// fingerprint): answered 422 Unprocessable Content.
	ErrKeyReused = echofence.ErrKeyReused
	// ErrBodyTooLarge means the request's body is over [IdempotencyConfig.MaxBody]: answered
	// 413 Content Too Large.
	ErrBodyTooLarge = echofence.ErrBodyTooLarge
)

// Idempotent returns the idempotency middleware with locker and the defaults of
// [IdempotencyConfig]. It panics when locker is nil or unusable, as Echo's own constructors
// do; use [IdempotencyConfig.ToMiddleware] to get an error instead.
func Idempotent(locker *fencing.Locker) echo.MiddlewareFunc {
	return IdempotentWithConfig(IdempotencyConfig{Locker: locker})
}

// IdempotentWithConfig is [IdempotencyConfig.ToMiddleware] that panics on error, as Echo
// v5's XWithConfig functions and [FenceWithConfig] do.
func IdempotentWithConfig(config IdempotencyConfig) echo.MiddlewareFunc {
	return echofence.Must(config.ToMiddleware())
}

// ToMiddleware implements echo.MiddlewareConfigurator: it checks config and returns the
// middleware, which is safe for concurrent use and starts no goroutine of its own. It returns an error wrapping [fencing.ErrInvalid] when
// Locker is nil or was built with invalid options, when MaxBody or MaxWait is negative,
// Retention or LockTTL is out of range or LockTTL above the Locker's counter expiry, or
// Header or a ReplayHeaders entry is not a header name, and an error wrapping
// [fencing.ErrClosed] when Locker is closed. It does not talk to Redis.
func (config IdempotencyConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	return echofence.ToIdempotent[echo.MiddlewareFunc](glue(), echofence.IdempotencySettings[*echo.Context, middleware.Skipper](config))
}

// DefaultIdempotencyErrorHandler is the default [IdempotencyConfig.ErrorHandler]. It returns
// an error carrying an HTTP status (an echo.HTTPStatusCoder, such as echo.ErrUnauthorized or
// an *echo.HTTPError) found in err's chain as it is (a Scope or Fingerprint may return one),
// and otherwise an error whose body is an RFC 9457 problem document saying what happened,
// such as
//
//	{"type":"about:blank","title":"Conflict","status":409,"detail":"A request with this Idempotency-Key is being processed; retry later."}
//
// under both of Echo's error handlers, with Content-Type application/problem+json: 400, 409,
// 413 or 422 as ErrorHandler's comment says, 500 or 503. Like [NewHTTPError]'s, the body
// never holds err's text, even when the error handler is told to expose errors.
func DefaultIdempotencyErrorHandler(c *echo.Context, err error) error {
	if coded := statusError(err); coded != nil {
		return coded
	}
	return problemError(c, echofence.IdempotencyAnswer(err), err)
}

// DefaultFingerprint is the default [IdempotencyConfig.Fingerprint]: the SHA-256, in hex, of
// the request's method, route (c.Path()), path parameters (names and values) and body. It
// reads the body and puts it back for the handler. A Fingerprint of your own can build on
// it, say to add the query string:
//
//	func(c *echo.Context) (string, error) {
//		fp, err := fencemw.DefaultFingerprint(c)
//		return fp + " " + c.QueryString(), err
//	}
func DefaultFingerprint(c *echo.Context) (string, error) {
	return echofence.Fingerprint(c, pathValues)
}

// pathValues returns the request's path parameters as name, value pairs.
func pathValues(c *echo.Context) []string {
	values := c.PathValues()
	pairs := make([]string, 0, 2*len(values))
	for _, v := range values {
		pairs = append(pairs, v.Name, v.Value)
	}
	return pairs
}
