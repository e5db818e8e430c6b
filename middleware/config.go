package middleware

import (
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// Config configures the middleware. The zero value of every field but Locker selects its
// default. A Config is only read; one value may build any number of middlewares.
//
// The package github.com/fencekit/fencekit/middleware-v5 has a Config with the same
// fields for the other Echo major. Both convert to one internal type that holds the
// behaviour, so the two cannot drift apart but in their context type.
type Config struct {
	// Skipper decides which requests run without a lock. Default:
	// middleware.DefaultSkipper, which skips none. [SkipSafeMethods] locks only requests
	// with unsafe methods.
	Skipper middleware.Skipper

	// Locker takes the locks. Required. Per-request options come from TTL and MaxWait. A
	// Locker whose [fencing.Locker.Err] is set (built with options that can never work, or
	// closed) is refused by [Config.ToMiddleware].
	Locker *fencing.Locker

	// KeyLookup says where the key is found, in the form Echo's KeyAuth and CSRF use and
	// parse with middleware.CreateExtractors: "param:<name>", "header:<name>" (or
	// "header:<name>:<cut-prefix>"), "query:<name>", "form:<name>" or "cookie:<name>";
	// several, separated by commas, are tried in order. When a source yields several
	// values, the first is used, as c.Param, c.QueryParam and Header.Get do. Default:
	// [DefaultKeyLookup] ("param:id"). Ignored when KeyExtractor is set.
	KeyLookup string

	// KeyExtractor returns the key of a request, overriding KeyLookup. An error from it
	// means the request gets no lock: it goes to ErrorHandler (400 by default, or
	// the *echo.HTTPError it returned, as it is). Default: nil.
	KeyExtractor func(c echo.Context) (string, error)

	// KeysExtractor returns the keys of a request that locks several resources at once, such
	// as both accounts of a transfer, overriding KeyLookup and KeyExtractor. Each key names a
	// resource as KeyExtractor's key does ("<namespace>:<key>", or "<route> <key>"); the
	// resources are deduplicated and locked together with [fencing.Locker.DoAll], in its
	// canonical order, deadlock-free, each with its own token. With it set, ContextKey holds
	// a map[string]int64 from resource name to token ([fencing.TokenFor] reads one from the
	// request's context), TokenHeader carries one "name=token" value per resource, and
	// DenyHandler's resource is the one that was busy. An error from it, no key or more than
	// [fencing.MaxResources] go to ErrorHandler as for KeyExtractor. Default: nil.
	KeysExtractor func(c echo.Context) ([]string, error)

	// Namespace is the first part of every resource name: the lock of a request is named
	// "<namespace>:<key>" ([ResourceName]), with any ':' or '%' in the namespace, and a '/'
	// that starts it, percent-encoded so the name cannot be read two ways. Give several
	// routes the same Namespace to make them share their locks, or match the names another
	// program (an Asynq worker, say) locks: Namespace "order" and key "42" lock "order:42".
	//
	// Default: "" names the lock after the route and the key, "<route> <key>"
	// ([RouteResourceName]): the route path as registered (c.Path()) and the key,
	// separated by one space, with any '%' or ' ' in the route percent-encoded. PUT
	// /orders/42 on route "/orders/:id" locks "/orders/:id 42" (Redis key
	// "fencing:{/orders/:id 42}:lock"), for every method of the route. Such names start
	// with '/' and Namespace names never do, so distinct (route, key) and (namespace, key)
	// pairs never share a lock. Both Echo majors' packages name locks alike: a service moved
	// from one to the other keeps its locks and fence counters.
	Namespace string

	// TTL is the lease length, renewed every third of it while the handler runs. It must
	// be between [fencing.MinTTL] and [fencing.MaxTTL]. Default: 0, the Locker's TTL.
	TTL time.Duration

	// MaxWait is how long a request waits for a busy resource before it is denied. It must
	// not be negative. Default: 0, a single attempt. A request whose context ends first
	// (the client left, a deadline passed) is denied too.
	MaxWait time.Duration

	// Limit is how many requests may hold the same lock at once, across every process: at
	// most Limit calls per tenant to a rate-limited partner, say ([fencing.WithLimit]). A request over
	// the limit is busy: it waits up to MaxWait for a slot, then goes to DenyHandler (423 with
	// Retry-After). It must be between 0 and [fencing.MaxLimit]; every caller of a resource must use
	// the same limit (while requests hold it with another, a request goes to ErrorHandler with
	// an error wrapping [fencing.ErrInvalid]: 500 by default). Default: 0, which means 1: the
	// exclusive lock.
	Limit int

	// Shared says which requests take the lock shared ([fencing.Shared]): requests for which
	// it returns true hold the resource together, and an exclusive request holds it alone,
	// first come, first served across both kinds (a reader that arrives while a writer waits
	// waits behind it, so readers never starve a writer). [SharedSafeMethods] makes GET, HEAD
	// and OPTIONS shared. It cannot go with Limit above 1 or with KeysExtractor (an error
	// wrapping [fencing.ErrInvalid]). Default: nil, every request exclusive.
	Shared func(c echo.Context) bool

	// ContextKey is the key under which the token (an int64) is stored with c.Set (read it with [TokenFromEcho]).
	// It stays there after the handler returns, for loggers and error handlers. Default:
	// [DefaultContextKey] ("fencing.token").
	ContextKey string

	// TokenHeader, when set, names a response header that carries the token, such as
	// "Fencing-Token". It is set before the handler runs. Default: "" (no header).
	TokenHeader string

	// Label returns the label of the request's lock ([fencing.WithLabel]), which
	// [fencing.Locker.Inspect], and so the fencekit tool, shows for its holder or waiter;
	// "" for none. Default: nil, the request's ID: the X-Request-Id response header that
	// Echo's RequestID middleware sets (register it before this one), else the request's
	// X-Request-Id header, else no label. Either is fitted to a label: one over
	// [fencing.MaxLabelLen] bytes keeps its start and its end around "…", and a control
	// character becomes '?'.
	Label func(c echo.Context) string

	// ErrorHandler builds the response when the lock cannot be tried or taken for a reason
	// other than contention: err wraps [fencing.ErrInvalid] when the request has no valid
	// key or its resource name is longer than [fencing.MaxResourceLen], and also when the
	// Locker refuses the call's options (a TTL above its counter expiry, say), and is a
	// Redis or Locker error ([fencing.ErrClosed], say) otherwise. Its result is returned to
	// Echo; nil ends the request without running the handler (write a response first).
	// Default: [DefaultErrorHandler] (400, 500 for options the Locker refuses, or 503).
	ErrorHandler func(c echo.Context, err error) error

	// DenyHandler builds the response when the resource is busy: err matches
	// [fencing.ErrNotAcquired], and also the context's error when the request's context
	// ended while waiting. resource is the lock's name. Retry-After is already set when it
	// is called. Its result is returned to Echo; nil ends the request without running the
	// handler (write a response first). Default: [DefaultDenyHandler] (423).
	DenyHandler func(c echo.Context, resource string, err error) error

	// LostHandler builds the response when the handler lost the lock while it ran and says
	// so: its error matches store.ErrStaleToken (a store refused a write, a newer holder's
	// token having passed the request's) or [fencing.ErrNotHeld] (the lease lapsed or another
	// owner took the lock; the request's context was cancelled with that cause: return
	// context.Cause(ctx)), through any wrapping with %w. It is called only when the handler
	// wrote no response and its error carries no HTTP status of its own (an answer the
	// handler chose stands); otherwise the handler's error reaches Echo unchanged. err is the
	// handler's error; resource is the lock's name (with KeysExtractor, the first of the
	// request's resources: the errors do not say which lock was lost). Retry-After is already
	// set, to 1 second: the lock is free by then, or its new holder's request answers 423
	// with a Retry-After of its own. Its result is returned to Echo; nil ends the request
	// (write a response first). Default: [DefaultLostHandler] (503).
	LostHandler func(c echo.Context, resource string, err error) error
}

// DefaultConfig is the configuration [Fence] uses, with Locker to be set: every request is
// locked, the key is the path parameter "id" ([DefaultKeyLookup]), the lock is named after
// the route and the key ("/orders/:id 42"), the resource is busy after one attempt (423
// Locked), the lease is the Locker's and the token is stored under [DefaultContextKey].
// Copy it and change fields, as with Echo's own DefaultXConfig values; its zero fields
// select the same defaults, so Config{Locker: l} behaves the same.
var DefaultConfig = Config(echofence.Defaults[echo.Context, middleware.Skipper](
	middleware.DefaultSkipper, DefaultErrorHandler, DefaultDenyHandler, DefaultLostHandler))

// FenceWithConfig returns the middleware configured by config. It panics when
// [Config.ToMiddleware] returns an error, as Echo's own XWithConfig constructors do; use
// ToMiddleware to get the error instead.
func FenceWithConfig(config Config) echo.MiddlewareFunc {
	return echofence.Must(config.ToMiddleware())
}

// ToMiddleware checks config and returns the middleware, which is safe for concurrent use
// and starts no goroutine of its own (Locker.Do renews each lease on a goroutine that ends
// with the request). It returns an error wrapping [fencing.ErrInvalid] when Locker is nil
// or was built with invalid options, when TTL is out of range, MaxWait negative or
// KeyLookup unusable, and an error wrapping [fencing.ErrClosed] when Locker is closed. It
// does not talk to Redis.
func (config Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	return echofence.ToMiddleware[echo.MiddlewareFunc](glue(), echofence.Settings[echo.Context, middleware.Skipper](config))
}
