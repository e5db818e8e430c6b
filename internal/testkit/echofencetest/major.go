package echofencetest

import (
	"net/http"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

// Major is one Echo major's adapter as the suite drives it, through types that do not
// depend on the major.
type Major interface {
	// NewEcho returns an Echo whose error handler passes every error to record and then
	// answers as Echo's default handler does, set to show internal errors (v4: e.Debug; v5:
	// DefaultHTTPErrorHandler(true)), so that a detail leaked into an error's text would
	// show in the body.
	NewEcho(record func(err error)) Echo
	// ToMiddleware and IdempotencyToMiddleware build the adapter's middleware from cfg,
	// converted with Settings and IdemSettings; FenceWithConfig and IdempotentWithConfig
	// are the adapter's, which panic on an invalid cfg; Fence and Idempotent take a Locker.
	ToMiddleware(cfg Config) (Middleware, error)
	FenceWithConfig(cfg Config) Middleware
	Fence(locker *fencing.Locker) Middleware
	IdempotencyToMiddleware(cfg IdemConfig) (Middleware, error)
	IdempotentWithConfig(cfg IdemConfig) Middleware
	Idempotent(locker *fencing.Locker) Middleware
	// DefaultConfig builds the adapter's DefaultConfig, with Locker set, with ToMiddleware.
	DefaultConfig(locker *fencing.Locker) (Middleware, error)
	// Recover is Echo's Recover middleware, without stack printing.
	Recover() Middleware
	// Around returns a middleware that calls fn with the request and the rest of the chain.
	Around(fn func(r Request, next func() error) error) Middleware
	// NewHTTPError is the adapter's NewHTTPError; StatusError returns a new error value of
	// Echo's own with the status code.
	NewHTTPError(code int, err error) error
	StatusError(code int) error
	// HTTPStatus returns the status Echo's default error handler reads from err: v4 takes
	// only an *echo.HTTPError itself (Echo v4 type-asserts), v5 any error in the chain with
	// a StatusCode method. 0 means none.
	HTTPStatus(err error) int
	// Query reports whether the major routes RFC 10008's QUERY method as safe (Echo v5):
	// SkipSafeMethods skips it, SharedSafeMethods shares it and the idempotency middleware's
	// default Skipper passes it through.
	Query() bool
	// Constants returns the adapter's DefaultKeyLookup, DefaultContextKey and MaxKeyLen.
	Constants() (keyLookup, contextKey string, maxKeyLen int)
	// IdempotencyErrors returns the adapter's ErrKeyReused and ErrBodyTooLarge.
	IdempotencyErrors() (keyReused, bodyTooLarge error)
}

// Config is the adapter's Config with the Echo types replaced.
type Config struct {
	Locker          *fencing.Locker
	SkipSafeMethods bool // Skipper: the adapter's SkipSafeMethods
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

// Settings returns cfg as the settings of an adapter's Config, whose callbacks get the Echo
// context as req returns it. std holds the adapter's SkipSafeMethods (as Skipper),
// SharedSafeMethods (as Shared) and default handlers, used where cfg asks for them.
func Settings[C echofence.Context, S ~func(C) bool](cfg Config, req func(C) Request, std echofence.Settings[C, S]) echofence.Settings[C, S] {
	s := echofence.Settings[C, S]{Locker: cfg.Locker, KeyLookup: cfg.KeyLookup, Namespace: cfg.Namespace, TTL: cfg.TTL,
		MaxWait: cfg.MaxWait, Limit: cfg.Limit, ContextKey: cfg.ContextKey, TokenHeader: cfg.TokenHeader}
	if cfg.SkipSafeMethods {
		s.Skipper = std.Skipper
	}
	if cfg.SharedSafeMethods {
		s.Shared = std.Shared
	}
	if f := cfg.KeyExtractor; f != nil {
		s.KeyExtractor = func(c C) (string, error) { return f(req(c)) }
	}
	if f := cfg.KeysExtractor; f != nil {
		s.KeysExtractor = func(c C) ([]string, error) { return f(req(c)) }
	}
	if f := cfg.ErrorHandler; f != nil {
		s.ErrorHandler = func(c C, err error) error { return f(req(c), err) }
	}
	if f := cfg.DenyHandler; f != nil {
		s.DenyHandler = func(c C, resource string, err error) error { return f(req(c), resource, err) }
	}
	if f := cfg.LostHandler; f != nil {
		s.LostHandler = func(c C, resource string, err error) error { return f(req(c), resource, err) }
	}
	if cfg.DefaultHandlers {
		s.ErrorHandler, s.DenyHandler, s.LostHandler = std.ErrorHandler, std.DenyHandler, std.LostHandler
	}
	return s
}

// IdemSettings returns cfg as the settings of an adapter's IdempotencyConfig, whose
// callbacks get the Echo context as req returns it.
func IdemSettings[C echofence.Context, S ~func(C) bool](cfg IdemConfig, req func(C) Request) echofence.IdempotencySettings[C, S] {
	s := echofence.IdempotencySettings[C, S]{Locker: cfg.Locker, Header: cfg.Header, Required: cfg.Required, MaxBody: cfg.MaxBody,
		Retention: cfg.Retention, LockTTL: cfg.LockTTL, MaxWait: cfg.MaxWait, Keep: cfg.Keep, ReplayHeaders: cfg.ReplayHeaders}
	if cfg.SkipNone {
		s.Skipper = func(C) bool { return false }
	}
	if f := cfg.Scope; f != nil {
		s.Scope = func(c C) (string, error) { return f(req(c)) }
	}
	if f := cfg.Fingerprint; f != nil {
		s.Fingerprint = func(c C) (string, error) { return f(req(c)) }
	}
	if f := cfg.ErrorHandler; f != nil {
		s.ErrorHandler = func(c C, err error) error { return f(req(c), err) }
	}
	return s
}

// Built returns what a ToMiddleware returned, with no middleware at all on error.
func Built[M any](mw M, err error) (Middleware, error) {
	if err != nil {
		return nil, err
	}
	return mw, nil
}

// Middlewares returns mws as the major's MiddlewareFuncs, M.
func Middlewares[M any](mws []Middleware) []M {
	out := make([]M, len(mws))
	for i, mw := range mws {
		out[i] = mw.(M)
	}
	return out
}

// Middleware is an echo.MiddlewareFunc of the major.
type Middleware any

// Handler is a route's handler.
type Handler func(r Request) error

// Request is the Echo context a handler gets: Echo's methods, and three of the adapter's.
type Request interface {
	Request() *http.Request
	Param(name string) string
	Path() string
	Get(key string) any
	NoContent(code int) error
	String(code int, s string) error
	JSON(code int, v any) error
	// Token is the adapter's TokenFromEcho.
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

// Echo is an Echo instance of the major.
type Echo interface {
	http.Handler
	Router
	Group(prefix string, mws ...Middleware) Router
	Use(mws ...Middleware)
}
