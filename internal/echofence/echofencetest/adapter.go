package echofencetest

import (
	"net/http"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

// The suite's one driver is generic over an Echo major's types: C its context, S its
// middleware.Skipper, H its HandlerFunc, M its MiddlewareFunc, Cfg the adapter's Config, E
// what the adapter's NewHTTPError returns, Srv its *Echo and G its *Group, whose Add and Any
// return RA and RB. v4.go and v5.go instantiate it.

// echoContext is what the suite calls on an Echo context: both majors' contexts have it.
type echoContext interface {
	echofence.Context
	Param(name string) string
	Get(key string) any
	NoContent(code int) error
	String(code int, s string) error
	JSON(code int, i any) error
}

// adapterConfig is an adapter's Config.
type adapterConfig[C echofence.Context, S ~func(C) bool, M any] interface {
	~echofence.Settings[C, S]
	ToMiddleware() (M, error)
}

// idempotencyConfig is an adapter's IdempotencyConfig.
type idempotencyConfig[C echofence.Context, S ~func(C) bool, M any] interface {
	~echofence.IdempotencySettings[C, S]
	ToMiddleware() (M, error)
}

// routes is an *echo.Echo or an *echo.Group.
type routes[H, M, RA, RB any] interface {
	Add(method, path string, h H, m ...M) RA
	Any(path string, h H, m ...M) RB
}

// server is an *echo.Echo.
type server[H, M, RA, RB, G any] interface {
	http.Handler
	routes[H, M, RA, RB]
	Group(prefix string, m ...M) G
	Use(m ...M)
}

// api is an adapter package's API.
type api[C echofence.Context, S ~func(C) bool, M any, Cfg adapterConfig[C, S, M], E error, ICfg idempotencyConfig[C, S, M]] struct {
	fence             func(locker *fencing.Locker) M
	fenceWithConfig   func(config Cfg) M
	defaultConfig     Cfg
	skipSafeMethods   S
	defaultError      func(c C, err error) error
	defaultDeny       func(c C, resource string, err error) error
	defaultLost       func(c C, resource string, err error) error
	newHTTPError      func(code int, err error) E
	tokenFromEcho     func(c C) (int64, bool)
	maxKeyLen         int
	defaultKeyLookup  string
	defaultContextKey string

	idempotent           func(locker *fencing.Locker) M
	idempotentWithConfig func(config ICfg) M
	defaultFingerprint   func(c C) (string, error)
	errKeyReused         error
	errBodyTooLarge      error
	responseHeader       func(c C) http.Header
	sharedSafeMethods    func(c C) bool
}

// adapter is a Driver: an adapter package's API and the Echo major it serves.
type adapter[C echoContext, S ~func(C) bool, H ~func(C) error, M ~func(H) H, Cfg adapterConfig[C, S, M], E error,
	ICfg idempotencyConfig[C, S, M], Srv server[H, M, RA, RB, G], G routes[H, M, RA, RB], RA, RB any] struct {
	major string
	api   api[C, S, M, Cfg, E, ICfg]
	// newEcho returns an Echo with Recover and an error handler that calls record, then
	// answers as Echo's default handler showing internal errors.
	newEcho     func(record func(error)) Srv
	recoverer   func() M
	statusError func(code int) error
	httpStatus  func(err error) int
	query       bool // QUERY is a safe method
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Query() bool { return a.query }

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Name() string { return a.major }

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) NewEcho(log *ErrorLog) Echo {
	srv := a.newEcho(log.Record)
	return echoServer[H, M, RA, RB, G, Srv]{router[H, M, RA, RB, Srv]{srv, a.handler, middlewares[M]}}
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) ToMiddleware(cfg Config) (Middleware, error) {
	mw, err := a.config(cfg).ToMiddleware()
	if err != nil {
		return nil, err
	}
	return mw, nil
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) FenceWithConfig(cfg Config) Middleware {
	return a.api.fenceWithConfig(a.config(cfg))
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Fence(l *fencing.Locker) Middleware {
	return a.api.fence(l)
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) DefaultConfig(l *fencing.Locker) (Middleware, error) {
	s := echofence.Settings[C, S](a.api.defaultConfig)
	s.Locker = l
	return Cfg(s).ToMiddleware()
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Recover() Middleware {
	return a.recoverer()
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Around(fn func(r Request, next func() error) error) Middleware {
	return M(func(next H) H {
		return H(func(c C) error { return fn(a.request(c), func() error { return next(c) }) })
	})
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) NewHTTPError(code int, err error) error {
	return a.api.newHTTPError(code, err)
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) StatusError(code int) error {
	return a.statusError(code)
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) HTTPStatus(err error) int {
	return a.httpStatus(err)
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) MaxKeyLen() int { return a.api.maxKeyLen }

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) DefaultKeyLookup() string {
	return a.api.defaultKeyLookup
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) DefaultContextKey() string {
	return a.api.defaultContextKey
}

// config returns cfg as the adapter's Config.
func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) config(cfg Config) Cfg {
	s := echofence.Settings[C, S]{Locker: cfg.Locker, KeyLookup: cfg.KeyLookup, Namespace: cfg.Namespace, TTL: cfg.TTL,
		MaxWait: cfg.MaxWait, Limit: cfg.Limit, ContextKey: cfg.ContextKey, TokenHeader: cfg.TokenHeader}
	if cfg.SkipSafeMethods {
		s.Skipper = a.api.skipSafeMethods
	}
	if cfg.SharedSafeMethods {
		s.Shared = a.api.sharedSafeMethods
	}
	if f := cfg.KeyExtractor; f != nil {
		s.KeyExtractor = func(c C) (string, error) { return f(a.request(c)) }
	}
	if f := cfg.KeysExtractor; f != nil {
		s.KeysExtractor = func(c C) ([]string, error) { return f(a.request(c)) }
	}
	if f := cfg.ErrorHandler; f != nil {
		s.ErrorHandler = func(c C, err error) error { return f(a.request(c), err) }
	}
	if f := cfg.DenyHandler; f != nil {
		s.DenyHandler = func(c C, resource string, err error) error { return f(a.request(c), resource, err) }
	}
	if f := cfg.LostHandler; f != nil {
		s.LostHandler = func(c C, resource string, err error) error { return f(a.request(c), resource, err) }
	}
	if cfg.DefaultHandlers {
		s.ErrorHandler, s.DenyHandler, s.LostHandler = a.api.defaultError, a.api.defaultDeny, a.api.defaultLost
	}
	return Cfg(s)
}

// handler returns h as the major's HandlerFunc.
func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) handler(h Handler) H {
	return H(func(c C) error { return h(a.request(c)) })
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) request(c C) Request {
	return request[C]{c: c, token: a.api.tokenFromEcho, header: a.api.responseHeader, fingerprint: a.api.defaultFingerprint}
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) IdempotencyToMiddleware(cfg IdemConfig) (Middleware, error) {
	mw, err := a.idemConfig(cfg).ToMiddleware()
	if err != nil {
		return nil, err
	}
	return mw, nil
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) IdempotentWithConfig(cfg IdemConfig) Middleware {
	return a.api.idempotentWithConfig(a.idemConfig(cfg))
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) Idempotent(l *fencing.Locker) Middleware {
	return a.api.idempotent(l)
}

func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) IdempotencyErrors() (error, error) {
	return a.api.errKeyReused, a.api.errBodyTooLarge
}

// idemConfig returns cfg as the adapter's IdempotencyConfig.
func (a *adapter[C, S, H, M, Cfg, E, ICfg, Srv, G, RA, RB]) idemConfig(cfg IdemConfig) ICfg {
	s := echofence.IdempotencySettings[C, S]{Locker: cfg.Locker, Header: cfg.Header, Required: cfg.Required,
		MaxBody: cfg.MaxBody, Retention: cfg.Retention, LockTTL: cfg.LockTTL, MaxWait: cfg.MaxWait, Keep: cfg.Keep, ReplayHeaders: cfg.ReplayHeaders}
	if cfg.SkipNone {
		s.Skipper = func(C) bool { return false }
	}
	if f := cfg.Scope; f != nil {
		s.Scope = func(c C) (string, error) { return f(a.request(c)) }
	}
	if f := cfg.Fingerprint; f != nil {
		s.Fingerprint = func(c C) (string, error) { return f(a.request(c)) }
	}
	if f := cfg.ErrorHandler; f != nil {
		s.ErrorHandler = func(c C, err error) error { return f(a.request(c), err) }
	}
	return ICfg(s)
}

// middlewares returns mws as the major's MiddlewareFuncs.
func middlewares[M any](mws []Middleware) []M {
	out := make([]M, len(mws))
	for i, mw := range mws {
		out[i] = mw.(M)
	}
	return out
}

// router is an *echo.Echo or *echo.Group as a Router.
type router[H, M, RA, RB any, G routes[H, M, RA, RB]] struct {
	g           G
	handler     func(h Handler) H
	middlewares func(mws []Middleware) []M
}

func (r router[H, M, RA, RB, G]) Add(method, path string, h Handler, mws ...Middleware) {
	r.g.Add(method, path, r.handler(h), r.middlewares(mws)...)
}

func (r router[H, M, RA, RB, G]) Any(path string, h Handler, mws ...Middleware) {
	r.g.Any(path, r.handler(h), r.middlewares(mws)...)
}

// echoServer is an *echo.Echo as an Echo.
type echoServer[H, M, RA, RB any, G routes[H, M, RA, RB], Srv server[H, M, RA, RB, G]] struct {
	router[H, M, RA, RB, Srv]
}

func (s echoServer[H, M, RA, RB, G, Srv]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.g.ServeHTTP(w, r)
}

func (s echoServer[H, M, RA, RB, G, Srv]) Group(prefix string, mws ...Middleware) Router {
	return router[H, M, RA, RB, G]{s.g.Group(prefix, s.middlewares(mws)...), s.handler, s.middlewares}
}

func (s echoServer[H, M, RA, RB, G, Srv]) Use(mws ...Middleware) { s.g.Use(s.middlewares(mws)...) }

// request is an Echo context as a Request.
type request[C echoContext] struct {
	c           C
	token       func(c C) (int64, bool)
	header      func(c C) http.Header
	fingerprint func(c C) (string, error)
}

func (r request[C]) Request() *http.Request          { return r.c.Request() }
func (r request[C]) Param(name string) string        { return r.c.Param(name) }
func (r request[C]) Path() string                    { return r.c.Path() }
func (r request[C]) Get(key string) any              { return r.c.Get(key) }
func (r request[C]) NoContent(code int) error        { return r.c.NoContent(code) }
func (r request[C]) String(code int, s string) error { return r.c.String(code, s) }
func (r request[C]) JSON(code int, v any) error      { return r.c.JSON(code, v) }
func (r request[C]) Token() (int64, bool)            { return r.token(r.c) }
func (r request[C]) Header() http.Header             { return r.header(r.c) }
func (r request[C]) DefaultFingerprint() (string, error) {
	return r.fingerprint(r.c)
}
