package echofence

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
)

// HeaderRetryAfter is the response header the middleware sets on a busy resource.
const HeaderRetryAfter = "Retry-After"

// Context is what the middleware needs of an Echo context; echo.Context (v4) and
// *echo.Context (v5) both have these methods.
type Context interface {
	Request() *http.Request
	SetRequest(r *http.Request)
	Set(key string, val any)
	Path() string
}

// Glue is what one Echo major supplies besides its context type.
type Glue[C Context] struct {
	// Header returns the response's header.
	Header func(c C) http.Header
	// Extractors returns Echo's value extractors for a KeyLookup that [checkLookup] accepted
	// (middleware.CreateExtractors), each returning the values of its source.
	Extractors func(lookup string) ([]func(c C) ([]string, error), error)
	// ErrorHandler, DenyHandler and LostHandler are the package's DefaultErrorHandler,
	// DefaultDenyHandler and DefaultLostHandler, used when the Settings leave them nil.
	ErrorHandler func(c C, err error) error
	DenyHandler  func(c C, resource string, err error) error
	LostHandler  func(c C, resource string, err error) error
	// Committed reports whether c's response has been written (its status sent): the
	// handler's own answer, which an answer of the middleware's must not replace. It
	// reports true when it cannot tell.
	Committed func(c C) bool
	// HasStatus reports whether err carries an HTTP status of its own, as the package's
	// DefaultErrorHandler finds one: an answer the handler chose, left as it is.
	HasStatus func(err error) bool
	// Query is true for an Echo major that routes the QUERY method (Echo v5), which
	// [SafeMethod] and [ReadMethod] then count as safe.
	Query bool

	// What the idempotency middleware needs besides.

	// PathValues returns the request's path parameters as name, value pairs, in the route's
	// order.
	PathValues func(c C) []string
	// Response returns c's response, as an http.ResponseWriter.
	Response func(c C) http.ResponseWriter
	// Swap makes w, wrapped as Echo wraps a response, the response the handler writes to,
	// and returns a function that puts back the one it replaced.
	Swap func(c C, w http.ResponseWriter) (restore func())
	// HandleError hands err to Echo's HTTPErrorHandler, which answers on c's response.
	HandleError func(c C, err error)
	// IdempotencyErrorHandler is the package's default idempotency error handler.
	IdempotencyErrorHandler func(c C, err error) error
}

// Fence is checked Settings with their defaults applied. It is never modified after [New],
// so one Fence serves concurrent requests.
type Fence[C Context] struct {
	skip         func(c C) bool // nil: skip none
	locker       *fencing.Locker
	opts         []fencing.CallOption // per call: WithMaxWait, WithLimit, and WithTTL when set
	sharedOpts   []fencing.CallOption // opts and fencing.Shared, for the requests shared says
	shared       func(c C) bool       // nil: every request exclusive
	extract      func(c C) (string, error)
	extractAll   func(c C) ([]string, error) // set: several resources per request (fenceall.go)
	namespace    string
	contextKey   string
	tokenHeader  string
	header       func(c C) http.Header
	errorHandler func(c C, err error) error
	denyHandler  func(c C, resource string, err error) error
	lostHandler  func(c C, resource string, err error) error
	committed    func(c C) bool
	hasStatus    func(err error) bool
	label        func(c C) string // nil: RequestLabel's request ID
}

// New applies the defaults to s and checks it. It returns an error wrapping
// fencing.ErrInvalid when the Locker is nil or was built with invalid options, the TTL is out
// of range, MaxWait is negative or the KeyLookup is unusable, and one wrapping
// fencing.ErrClosed when the Locker is closed. It does not talk to Redis.
func New[C Context, S ~func(C) bool](g Glue[C], s Settings[C, S]) (*Fence[C], error) {
	f := &Fence[C]{
		locker:       s.Locker,
		extract:      s.KeyExtractor,
		extractAll:   s.KeysExtractor,
		namespace:    s.Namespace,
		contextKey:   s.ContextKey,
		tokenHeader:  s.TokenHeader,
		header:       g.Header,
		errorHandler: s.ErrorHandler,
		denyHandler:  s.DenyHandler,
		lostHandler:  s.LostHandler,
		committed:    g.Committed,
		hasStatus:    g.HasStatus,
		label:        s.Label,
	}
	if s.Skipper != nil {
		f.skip = (func(C) bool)(s.Skipper)
	}
	opts, err := callOptions(s.Locker, s.TTL, s.MaxWait, s.Limit)
	if err != nil {
		return nil, err
	}
	f.opts = opts
	if s.Shared != nil {
		switch {
		case s.Limit > 1:
			return nil, invalidf("Shared with Limit %d: a resource is shared or limited, not both", s.Limit)
		case s.KeysExtractor != nil:
			return nil, invalidf("Shared with KeysExtractor: several resources are locked exclusively")
		}
		f.shared = s.Shared
		f.sharedOpts = append(opts[:len(opts):len(opts)], fencing.Shared())
	}
	if f.extract == nil && f.extractAll == nil {
		lookup := s.KeyLookup
		if lookup == "" {
			lookup = DefaultKeyLookup
		}
		if f.extract, err = lookupExtractor(lookup, g.Extractors); err != nil {
			return nil, err
		}
	}
	if f.contextKey == "" {
		f.contextKey = DefaultContextKey
	}
	if f.errorHandler == nil {
		f.errorHandler = g.ErrorHandler
	}
	if f.denyHandler == nil {
		f.denyHandler = g.DenyHandler
	}
	if f.lostHandler == nil {
		f.lostHandler = g.LostHandler
	}
	return f, nil
}

// Serve runs one request: it names the resource, takes the lock through Locker.Do and runs
// next inside Do, or builds the error response.
func (f *Fence[C]) Serve(c C, next func(c C) error) error {
	if f.skip != nil && f.skip(c) {
		return next(c)
	}
	if f.extractAll != nil {
		return f.serveAll(c, next)
	}
	resource, err := f.resource(c)
	if err != nil {
		return f.errorHandler(c, err)
	}
	req := c.Request()
	if token, ok := heldToken(req.Context(), f.locker, resource); ok {
		// An outer middleware holds this lock for the request: run under it.
		f.expose(c, token)
		return next(c)
	}

	// Do returns fn's error joined with ErrNotHeld when the lock was lost, and release
	// errors; the handler's own result is kept apart so it reaches Echo unchanged. A panic
	// in the handler goes through Do, which releases the lock, on to Echo's Recover.
	var (
		ran    bool
		result error
	)
	opts := f.opts
	if f.shared != nil && f.shared(c) {
		opts = f.sharedOpts
	}
	opts = labelled(RequestLabel(c, f.label, f.header), opts)
	err = f.locker.Do(req.Context(), resource, func(ctx context.Context) error {
		ran = true
		result = f.run(ctx, c, next, req, resource)
		return result
	}, opts...)
	switch {
	case ran:
		return f.answer(c, resource, result)
	case errors.Is(err, fencing.ErrNotAcquired):
		f.header(c).Set(HeaderRetryAfter, RetryAfter(err))
		return f.denyHandler(c, resource, err)
	case errors.Is(err, fencing.ErrInvalid):
		// The name passed the checks above, so the Locker refused its own settings with
		// the call's options (a TTL above its counter expiry, say): the server's fault.
		err = setupErr(err)
	}
	return f.errorHandler(c, err)
}

// run calls next with the work context of Do as the request's context, and puts the
// original request back when next returns or panics.
func (f *Fence[C]) run(ctx context.Context, c C, next func(c C) error, req *http.Request, resource string) error {
	token, _ := fencing.TokenFor(ctx, resource)
	f.expose(c, token)
	c.SetRequest(req.WithContext(withHeld(ctx, f.locker, resource, token)))
	defer c.SetRequest(req)
	return next(c)
}

// expose makes the token available to the handler: c.Get and the response header.
func (f *Fence[C]) expose(c C, token int64) {
	c.Set(f.contextKey, token)
	if f.tokenHeader != "" {
		f.header(c).Set(f.tokenHeader, strconv.FormatInt(token, 10))
	}
}

// MethodQuery is the QUERY method of RFC 10008: safe and idempotent, a GET whose query is in
// the body. Echo v5 routes it (echo.QUERY); Echo v4 and net/http do not know it.
const MethodQuery = "QUERY"

// ReadMethod reports whether method only reads: GET, HEAD or OPTIONS, and with query QUERY
// too, which the adapters' SharedSafeMethods makes shared. query is true for an Echo major
// that knows QUERY ([Glue.Query]).
func ReadMethod(method string, query bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	case MethodQuery:
		return query
	}
	return false
}

// SafeMethod reports whether method is one of the safe methods of RFC 9110 (GET, HEAD,
// OPTIONS and TRACE), and with query QUERY too (RFC 10008), which the adapters'
// SkipSafeMethods and the idempotency middleware's default Skipper skip. query is true for an
// Echo major that knows QUERY ([Glue.Query]).
func SafeMethod(method string, query bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	case MethodQuery:
		return query
	}
	return false
}

// ToMiddleware builds the Fence of s with g and returns it as an Echo major's
// MiddlewareFunc M, whose HandlerFunc is H; see [New] for the errors.
func ToMiddleware[M ~func(next H) H, H ~func(c C) error, C Context, S ~func(C) bool](g Glue[C], s Settings[C, S]) (M, error) {
	f, err := New(g, s)
	if err != nil {
		return nil, err
	}
	return middlewareOf[M](f.Serve), nil
}

// middlewareOf returns serve as an Echo major's MiddlewareFunc M, whose HandlerFunc is H.
func middlewareOf[M ~func(next H) H, H ~func(c C) error, C Context](serve func(c C, next func(c C) error) error) M {
	return M(func(next H) H {
		return H(func(c C) error { return serve(c, next) })
	})
}

// Must returns mw, or panics with err when it is not nil, as Echo's XWithConfig
// constructors do.
func Must[M any](mw M, err error) M {
	if err != nil {
		panic(err)
	}
	return mw
}
