package echofencetest

import (
	"net/http"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// Driver is one Echo major's adapter, seen through types that do not depend on the major:
// [V4] and [V5].
type Driver interface {
	// Name names the major: "v4" or "v5".
	Name() string
	// NewEcho returns an Echo with Recover registered first, and an error handler that
	// records every error in log and then answers as Echo's default handler does, set to
	// show internal errors (v4: e.Debug; v5: DefaultHTTPErrorHandler(true)), so that a
	// detail leaked into an error's text would show in the body.
	NewEcho(log *ErrorLog) Echo
	// ToMiddleware builds the adapter's middleware with Config.ToMiddleware.
	ToMiddleware(cfg Config) (Middleware, error)
	// FenceWithConfig is the adapter's FenceWithConfig: it panics on an invalid cfg.
	FenceWithConfig(cfg Config) Middleware
	// Fence is the adapter's Fence(locker).
	Fence(locker *fencing.Locker) Middleware
	// DefaultConfig is the adapter's DefaultConfig with Locker set, built with ToMiddleware.
	DefaultConfig(locker *fencing.Locker) (Middleware, error)
	// Recover is Echo's Recover middleware, without stack printing.
	Recover() Middleware
	// Around returns a middleware that calls fn with the request and the rest of the chain.
	Around(fn func(r Request, next func() error) error) Middleware
	// NewHTTPError is the adapter's NewHTTPError.
	NewHTTPError(code int, err error) error
	// StatusError returns a new error value of Echo's own with the status code.
	StatusError(code int) error
	// HTTPStatus returns the status Echo's default error handler reads from err: v4 takes
	// only an *echo.HTTPError itself (Echo v4 type-asserts), v5 any error in the chain with
	// a StatusCode method. 0 means none.
	HTTPStatus(err error) int
	// Query reports whether the major routes RFC 10008's QUERY method as safe (Echo v5):
	// SkipSafeMethods skips it, SharedSafeMethods shares it and the idempotency middleware's
	// default Skipper passes it through.
	Query() bool
	// MaxKeyLen, DefaultKeyLookup and DefaultContextKey are the adapter's constants.
	MaxKeyLen() int
	DefaultKeyLookup() string
	DefaultContextKey() string

	// IdempotencyToMiddleware builds the adapter's idempotency middleware with
	// IdempotencyConfig.ToMiddleware.
	IdempotencyToMiddleware(cfg IdemConfig) (Middleware, error)
	// IdempotentWithConfig is the adapter's IdempotentWithConfig: it panics on an invalid cfg.
	IdempotentWithConfig(cfg IdemConfig) Middleware
	// Idempotent is the adapter's Idempotent(locker).
	Idempotent(locker *fencing.Locker) Middleware
	// IdempotencyErrors returns the adapter's ErrKeyReused and ErrBodyTooLarge.
	IdempotencyErrors() (keyReused, bodyTooLarge error)
}

// IdemConfig is the adapter's IdempotencyConfig with the Echo types replaced.
type IdemConfig struct {
	Locker        *fencing.Locker
	SkipNone      bool // Skipper: none skipped (the default skips the safe methods)
	Header        string
	Required      bool
	Scope         func(r Request) (string, error)
	Fingerprint   func(r Request) (string, error)
	MaxBody       int64
	Retention     time.Duration
	LockTTL       time.Duration
	MaxWait       time.Duration
	Keep          func(status int) bool
	ReplayHeaders []string
	ErrorHandler  func(r Request, err error) error
}

// Config is the adapter's Config with the Echo types replaced.
type Config struct {
	Locker          *fencing.Locker
	SkipSafeMethods bool // Skipper: SkipSafeMethods
	// SharedSafeMethods sets Shared to the adapter's SharedSafeMethods.
	SharedSafeMethods bool
	KeyLookup         string
	KeyExtractor      func(r Request) (string, error)
	KeysExtractor     func(r Request) ([]string, error)
	Namespace         string
	TTL               time.Duration
	MaxWait           time.Duration
	Limit             int
	ContextKey        string
	TokenHeader       string
	ErrorHandler      func(r Request, err error) error
	DenyHandler       func(r Request, resource string, err error) error
	LostHandler       func(r Request, resource string, err error) error
	// DefaultHandlers sets ErrorHandler, DenyHandler and LostHandler to the adapter's
	// DefaultErrorHandler, DefaultDenyHandler and DefaultLostHandler explicitly.
	DefaultHandlers bool
}

// Middleware is an echo.MiddlewareFunc of the driver's major.
type Middleware any

// Handler is a route's handler.
type Handler func(r Request) error

// Request is the Echo context a handler gets: Echo's methods, and Token, which is the
// adapter's TokenFromEcho.
type Request interface {
	Request() *http.Request
	Param(name string) string
	Path() string
	Get(key string) any
	NoContent(code int) error
	String(code int, s string) error
	JSON(code int, v any) error
	Token() (int64, bool)
	// Header is the response's header.
	Header() http.Header
	// DefaultFingerprint is the adapter's DefaultFingerprint.
	DefaultFingerprint() (string, error)
}

// Router adds routes: an Echo or a group.
type Router interface {
	Add(method, path string, h Handler, mws ...Middleware)
	Any(path string, h Handler, mws ...Middleware)
}

// Echo is an Echo instance of the driver's major.
type Echo interface {
	http.Handler
	Router
	Group(prefix string, mws ...Middleware) Router
	Use(mws ...Middleware)
}

// ErrorLog records the errors that reach Echo's error handler.
type ErrorLog struct {
	mu   sync.Mutex
	errs []error
}

// Record adds err.
func (l *ErrorLog) Record(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// Last returns the last error recorded, or nil.
func (l *ErrorLog) Last() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return nil
	}
	return l.errs[len(l.errs)-1]
}
