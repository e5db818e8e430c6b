package echofence

import (
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// Settings is the struct behind both adapters' Config. Each adapter declares a plain Config
// struct with exactly these fields, in this order and with these types for its Echo major
// (documented there, field by field, for go doc and pkg.go.dev), and converts it to
// Settings for [New]: Go converts between struct types with identical fields, so a field
// added here and not there, or the other way round, fails to compile. C is the Echo context
// type (echo.Context in v4, *echo.Context in v5) and S the major's middleware.Skipper. The
// comments below are the reference the adapters' field comments follow.
type Settings[C Context, S ~func(C) bool] = struct {
	// Skipper decides which requests run without a lock. Default: middleware.DefaultSkipper,
	// which skips none. The adapters' SkipSafeMethods locks only requests with unsafe
	// methods (QUERY is safe in Echo v5).
	Skipper S

	// Locker takes the locks. Required. Per-request options come from TTL and MaxWait.
	Locker *fencing.Locker

	// KeyLookup says where the key is found, in the form Echo's KeyAuth and CSRF use and
	// parse with middleware.CreateExtractors: "param:<name>", "header:<name>" (or
	// "header:<name>:<cut-prefix>"), "query:<name>", "form:<name>" or "cookie:<name>";
	// several, separated by commas, are tried in order. When a source yields several
	// values, the first is used, as c.Param, c.QueryParam and Header.Get do. Default:
	// DefaultKeyLookup ("param:id"). Ignored when KeyExtractor is set.
	KeyLookup string

	// KeyExtractor returns the key of a request, overriding KeyLookup. An error from it
	// means the request gets no lock: it goes to ErrorHandler (400 by default, or an error
	// of Echo's with its own status, such as echo.ErrNotFound, as it is). Default: nil.
	KeyExtractor func(c C) (string, error)

	// KeysExtractor returns the keys of a request that locks several resources at once,
	// overriding KeyLookup and KeyExtractor: each names a resource as KeyExtractor's key
	// does, and the resources are locked together with Locker.DoAll. ContextKey then holds
	// a map[string]int64 from resource name to token, TokenHeader carries one "name=token"
	// value per resource, and DenyHandler's resource is the busy one. Default: nil.
	KeysExtractor func(c C) ([]string, error)

	// Namespace is the first part of every resource name: the lock of a request is named
	// "<namespace>:<key>", with any ':' or '%' in the namespace, and a '/' that starts it,
	// percent-encoded so the name cannot be read two ways. Give several routes the same
	// Namespace to make them share their locks, or match the names another program (an
	// Asynq worker, say) locks: Namespace "order" and key "42" lock "order:42".
	//
	// Default: "" names the lock after the route and the key, "<route> <key>": the route
	// path as registered (c.Path(); in Echo v5 the same as c.RouteInfo().Path) and the key,
	// separated by one space, with any '%' or ' ' in the route percent-encoded. PUT
	// /orders/42 on route "/orders/:id" locks "/orders/:id 42" (Redis key
	// "fencing:{/orders/:id 42}:lock"), for every method of the route. Such names start
	// with '/' and Namespace names never do, so distinct (route, key) and (namespace, key)
	// pairs never share a lock. Both Echo majors name locks alike: a service moved from v4
	// to v5 keeps its locks and its fence counters.
	Namespace string

	// TTL is the lease length, renewed every third of it while the handler runs. It must
	// be between fencing.MinTTL and fencing.MaxTTL. Default: 0, the Locker's TTL.
	TTL time.Duration

	// MaxWait is how long a request waits for a busy resource before it is denied. It must
	// not be negative. Default: 0, a single attempt. A request whose context ends first
	// (the client left, a deadline passed) is denied too.
	MaxWait time.Duration

	// Limit is how many requests may hold the same lock at once, across every process: at
	// most Limit calls per tenant to a rate-limited partner, say (fencing.WithLimit). A request over
	// the limit is busy: it waits up to MaxWait for a slot, then goes to DenyHandler (423 with
	// Retry-After). It must be between 0 and fencing.MaxLimit; every caller of a resource must use
	// the same limit (while requests hold it with another, a request goes to ErrorHandler with
	// an error wrapping fencing.ErrInvalid: 500 by default). Default: 0, which means 1: the
	// exclusive lock.
	Limit int

	// Shared says which requests take the lock shared (fencing.Shared): requests for which it
	// returns true hold the resource together, and an exclusive request holds it alone,
	// first come, first served across both kinds (a reader that arrives while a writer waits
	// waits behind it). The adapters' SharedSafeMethods makes GET, HEAD and OPTIONS shared
	// (and QUERY in Echo v5).
	// It cannot go with Limit above 1 or with KeysExtractor (an error wrapping
	// fencing.ErrInvalid). Default: nil, every request exclusive.
	Shared func(c C) bool

	// ContextKey is the key under which the token (an int64) is stored with c.Set. It stays
	// there after the handler returns, for loggers and error handlers. Default:
	// DefaultContextKey ("fencing.token").
	ContextKey string

	// TokenHeader, when set, names a response header that carries the token, such as
	// "Fencing-Token". It is set before the handler runs. Default: "" (no header).
	TokenHeader string

	// Label returns the label of the request's lock (fencing.WithLabel), which
	// Locker.Inspect, and so the fencekit tool, shows for its holder or waiter; "" for none.
	// Default: nil, the request's ID (RequestLabel): the X-Request-Id response header that
	// Echo's RequestID middleware sets (register it before this one), else the request's
	// X-Request-Id header, else no label. Either is fitted to a label: one over
	// fencing.MaxLabelLen bytes keeps its start and its end around "…", and a control
	// character becomes '?'.
	Label func(c C) string

	// ErrorHandler builds the response when the lock cannot be tried or taken for a reason
	// other than contention: err wraps fencing.ErrInvalid when the request has no valid key
	// or its resource name is longer than fencing.MaxResourceLen, and also when the Locker
	// refuses the call's options (a TTL above its counter expiry, say), and is a Redis or
	// Locker error (fencing.ErrClosed, say) otherwise. Its result is returned to Echo; nil
	// ends the request without running the handler (write a response first). Default:
	// DefaultErrorHandler (400, 500 for options the Locker refuses, or 503).
	ErrorHandler func(c C, err error) error

	// DenyHandler builds the response when the resource is busy: err matches
	// fencing.ErrNotAcquired, and also the context's error when the request's context
	// ended while waiting. resource is the lock's name. Retry-After is already set when it
	// is called. Its result is returned to Echo; nil ends the request without running the
	// handler (write a response first). Default: DefaultDenyHandler (423).
	DenyHandler func(c C, resource string, err error) error

	// LostHandler builds the response when the handler lost the lock while it ran and said
	// so: its error matches store.ErrStaleToken (a store refused a write, a newer holder's
	// token having passed the request's) or fencing.ErrNotHeld (the lease lapsed or another
	// owner took the lock; the request's context was cancelled with that cause), through
	// any wrapping, the handler wrote no response, and its error carries no HTTP status of
	// its own (an answer it chose, which stands). Otherwise the handler's error reaches Echo
	// unchanged. err is the handler's error; resource is the lock's name (with KeysExtractor,
	// the first of the request's resources: the errors do not say which lock was lost).
	// Retry-After is already set (LostRetryAfter: 1 s) when it is called. Its result is
	// returned to Echo; nil ends the request (write a response first). Default:
	// DefaultLostHandler (503).
	LostHandler func(c C, resource string, err error) error
}

// Defaults returns an adapter's DefaultConfig: skipper, errorHandler, denyHandler and
// lostHandler are its major's middleware.DefaultSkipper and the adapter's
// DefaultErrorHandler, DefaultDenyHandler and DefaultLostHandler; the key is
// DefaultKeyLookup and the context key DefaultContextKey.
func Defaults[C Context, S ~func(C) bool](skipper S, errorHandler func(c C, err error) error,
	denyHandler, lostHandler func(c C, resource string, err error) error) Settings[C, S] {
	return Settings[C, S]{
		Skipper:      skipper,
		KeyLookup:    DefaultKeyLookup,
		ContextKey:   DefaultContextKey,
		ErrorHandler: errorHandler,
		DenyHandler:  denyHandler,
		LostHandler:  lostHandler,
	}
}

// WithLocker returns config with its Locker set to locker.
func WithLocker[Cfg ~Settings[C, S], C Context, S ~func(C) bool](config Cfg, locker *fencing.Locker) Cfg {
	s := Settings[C, S](config)
	s.Locker = locker
	return Cfg(s)
}
