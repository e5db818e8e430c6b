package middleware

import (
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/errtext"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// Defaults.
const (
	// DefaultKeyLookup is where the key is found when [Config.KeyLookup] is empty: the path
	// parameter "id".
	DefaultKeyLookup = "param:id"
	// DefaultContextKey is the key under which the token is stored in the Echo context when
	// [Config.ContextKey] is empty.
	DefaultContextKey = "fencing.token"
)

// Config configures the middleware. The zero value of every field but Locker selects its
// default. A Config is only read; one value may build any number of middlewares.
type Config struct {
	// Skipper decides which requests run without a lock. Default: middleware.DefaultSkipper,
	// which skips none. [SkipSafeMethods] locks only requests with unsafe methods.
	Skipper middleware.Skipper

	// Locker takes the locks. Required. Per-request options come from TTL and MaxWait.
	Locker *fencing.Locker

	// KeyLookup says where the key is found, in the form Echo's KeyAuth and CSRF use and
	// parse with middleware.CreateExtractors: "param:<name>", "header:<name>",
	// "query:<name>", "form:<name>" or "cookie:<name>"; several, separated by commas, are
	// tried in order. When a source yields several values, the first is used, as c.Param,
	// c.QueryParam and Header.Get do. Default: [DefaultKeyLookup] ("param:id"). Ignored
	// when KeyExtractor is set.
	KeyLookup string

	// KeyExtractor returns the key of a request, overriding KeyLookup. An error from it
	// means the request gets no lock: it goes to ErrorHandler (400 by default, or the
	// *echo.HTTPError it returned, as it is). Default: nil.
	KeyExtractor func(c echo.Context) (string, error)

	// Namespace is the first part of every resource name: the lock of a request is named
	// "<namespace>:<key>", with any ':' or '%' in the namespace, and a '/' that starts it,
	// percent-encoded so the name cannot be read two ways. Give several routes the same
	// Namespace to make them share their locks, or match the names another program (an
	// Asynq worker, say) locks: Namespace "order" and key "42" lock "order:42".
	//
	// Default: "" names the lock after the route and the key, "<route> <key>": the route
	// path as registered (c.Path()) and the key, separated by one space, with any '%' or
	// ' ' in the route percent-encoded. PUT /orders/42 on route "/orders/:id" locks
	// "/orders/:id 42" (Redis key "fencing:{/orders/:id 42}:lock"), for every method of the
	// route. Such names start with '/' and Namespace names never do, so distinct
	// (route, key) and (namespace, key) pairs never share a lock.
	Namespace string

	// TTL is the lease length, renewed every third of it while the handler runs. It must
	// be between [fencing.MinTTL] and [fencing.MaxTTL]. Default: 0, the Locker's TTL.
	TTL time.Duration

	// MaxWait is how long a request waits for a busy resource before it is denied. It must
	// not be negative. Default: 0, a single attempt. A request whose context ends first
	// (the client left, a deadline passed) is denied too.
	MaxWait time.Duration

	// ContextKey is the key under which the token (an int64) is stored with c.Set. It stays
	// there after the handler returns, for loggers and error handlers. Default:
	// [DefaultContextKey] ("fencing.token").
	ContextKey string

	// TokenHeader, when set, names a response header that carries the token, such as
	// "Fencing-Token". It is set before the handler runs. Default: "" (no header).
	TokenHeader string

	// ErrorHandler builds the response when the lock cannot be tried or taken for a reason
	// other than contention: err wraps [fencing.ErrInvalid] when the request has no valid
	// key, and is a Redis or Locker error ([fencing.ErrClosed], say) otherwise. Its result
	// is returned to Echo; nil ends the request without running the handler (write a
	// response first). Default: [DefaultErrorHandler] (400 or 503).
	ErrorHandler func(c echo.Context, err error) error

	// DenyHandler builds the response when the resource is busy: err matches
	// [fencing.ErrNotAcquired], and also the context's error when the request's context
	// ended while waiting. resource is the lock's name. Retry-After is already set when it
	// is called. Its result is returned to Echo; nil ends the request without running the
	// handler (write a response first). Default: [DefaultDenyHandler] (423).
	DenyHandler func(c echo.Context, resource string, err error) error
}

// DefaultConfig is the configuration [Fence] uses, with Locker to be set: every request is
// locked, the key is the path parameter "id" ([DefaultKeyLookup]), the lock is named after
// the route and the key ("/orders/:id 42"), the resource is busy after one attempt (423
// Locked), the lease is the Locker's and the token is stored under [DefaultContextKey].
// Copy it and change fields, as with Echo's own DefaultXConfig values; its zero fields
// select the same defaults, so Config{Locker: l} behaves the same.
var DefaultConfig = Config{
	Skipper:      middleware.DefaultSkipper,
	KeyLookup:    DefaultKeyLookup,
	ContextKey:   DefaultContextKey,
	ErrorHandler: DefaultErrorHandler,
	DenyHandler:  DefaultDenyHandler,
}

// Fence returns the middleware with [DefaultConfig] and locker: the key is the path
// parameter "id", the resource is busy after one attempt, and the lease is the Locker's.
// It panics when locker is nil or unusable (see [Config.ToMiddleware]), as Echo's own
// constructors do; use ToMiddleware to get an error instead.
func Fence(locker *fencing.Locker) echo.MiddlewareFunc {
	config := DefaultConfig
	config.Locker = locker
	return FenceWithConfig(config)
}

// FenceWithConfig returns the middleware configured by config. It panics when
// [Config.ToMiddleware] returns an error, as Echo's own XWithConfig constructors do; use
// ToMiddleware to get the error instead.
func FenceWithConfig(config Config) echo.MiddlewareFunc {
	mw, err := config.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware checks config and returns the middleware, which is safe for concurrent use
// and starts no goroutine of its own (Locker.Do renews each lease on a goroutine that ends
// with the request). It returns an error wrapping [fencing.ErrInvalid] when Locker is nil
// or was built with invalid options, when TTL is out of range, MaxWait negative or
// KeyLookup unusable, and an error wrapping [fencing.ErrClosed] when Locker is closed. It
// does not talk to Redis.
func (config Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	f, err := newFence(config)
	if err != nil {
		return nil, err
	}
	return f.middleware, nil
}

// SkipSafeMethods is a Skipper that skips the safe methods of RFC 9110 (GET, HEAD, OPTIONS
// and TRACE), so only requests that may change something take the lock.
func SkipSafeMethods(c echo.Context) bool {
	switch c.Request().Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// newFence applies the defaults and checks the configuration.
func newFence(config Config) (*fence, error) {
	f := &fence{
		skipper:      config.Skipper,
		locker:       config.Locker,
		extract:      config.KeyExtractor,
		namespace:    config.Namespace,
		contextKey:   config.ContextKey,
		tokenHeader:  config.TokenHeader,
		errorHandler: config.ErrorHandler,
		denyHandler:  config.DenyHandler,
	}
	if f.locker == nil {
		return nil, invalidf("nil Locker")
	}
	if config.TTL != 0 {
		if config.TTL < fencing.MinTTL || config.TTL > fencing.MaxTTL {
			return nil, invalidf("TTL %v out of range [%v, %v]", config.TTL, fencing.MinTTL, fencing.MaxTTL)
		}
		f.opts = append(f.opts, fencing.WithTTL(config.TTL))
	}
	if config.MaxWait < 0 {
		return nil, invalidf("negative MaxWait %v", config.MaxWait)
	}
	f.opts = append(f.opts, fencing.WithMaxWait(config.MaxWait))
	if err := probe(f.locker, f.opts); err != nil {
		return nil, err
	}
	if f.extract == nil {
		lookup := config.KeyLookup
		if lookup == "" {
			lookup = DefaultKeyLookup
		}
		extract, err := lookupExtractor(lookup)
		if err != nil {
			return nil, err
		}
		f.extract = extract
	}
	if f.skipper == nil {
		f.skipper = middleware.DefaultSkipper
	}
	if f.contextKey == "" {
		f.contextKey = DefaultContextKey
	}
	if f.errorHandler == nil {
		f.errorHandler = DefaultErrorHandler
	}
	if f.denyHandler == nil {
		f.denyHandler = DefaultDenyHandler
	}
	return f, nil
}

// probe reports an unusable Locker or call options without talking to Redis and without a
// call the Locker's hooks would observe: Locker.Err, then the options on a Locker of their own
// (New only applies them; the client it is given never connects).
func probe(l *fencing.Locker, opts []fencing.Option) error {
	err := l.Err()
	if err == nil && len(opts) > 0 {
		c := redis.NewClient(&redis.Options{})
		defer c.Close()
		check := fencing.New(c, opts...)
		defer check.Close()
		err = check.Err()
	}
	if err != nil {
		return errtext.New("fencemw: ", "Locker", err)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return errtext.New("fencemw: ", fmt.Sprintf(format, args...), fencing.ErrInvalid)
}
