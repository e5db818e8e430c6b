package echofence

import (
	"net/http"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// Defaults of the adapters' IdempotencyConfig.
const (
	// DefaultIdempotencyHeader is the request header that carries the key.
	DefaultIdempotencyHeader = "Idempotency-Key"
	// DefaultMaxBody is the default limit of a request's body and of a stored response's
	// body: 1 MiB.
	DefaultMaxBody = 1 << 20
	// DefaultRetention is how long a result is kept by default.
	DefaultRetention = 24 * time.Hour
	// DefaultLockTTL is the default lease of a key's lock (or the Locker's TTL, when that is
	// shorter). Locker.Do renews it every third while the handler runs, so it does not bound
	// a request; it bounds how long a first attempt that stalled (a paused process, a
	// partition) keeps its retries answered 409 before one takes the key over. 10s rides out
	// a pause or a Redis failover of several seconds without a second run, and renews only
	// requests that take over 3.3s.
	DefaultLockTTL = 10 * time.Second
	// MaxIdempotencyKeyLen is the longest key, in bytes, a request may give (after the
	// quotes of a Structured Field string, if any, are removed).
	MaxIdempotencyKeyLen = 255
	// HeaderIdempotentReplayed marks a response replayed from a stored result.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// DefaultReplayHeaders are the response headers stored and replayed by default.
var DefaultReplayHeaders = []string{"Content-Type", "Content-Location", "Location"}

// IdempotencySettings is the struct behind both adapters' IdempotencyConfig, which converts
// to it as Config converts to [Settings]: the same fields, in the same order, with C the
// Echo context type and S the major's middleware.Skipper. The adapters document each field.
type IdempotencySettings[C Context, S ~func(C) bool] = struct {
	// Skipper decides which requests run without the middleware. Default (nil): the safe
	// methods (GET, HEAD, OPTIONS, TRACE, and QUERY in Echo v5) are skipped.
	Skipper S
	// Locker takes the key's lock and keeps its result. Required.
	Locker *fencing.Locker
	// Header names the request header of the key. Default: "Idempotency-Key".
	Header string
	// Required answers 400 to a request without a key; otherwise it runs as if the
	// middleware were not there, and nothing is stored.
	Required bool
	// Scope returns the key space of a request, such as the authenticated client: the same
	// key in two scopes names two results. Default: nil, one space ("").
	Scope func(c C) (string, error)
	// Fingerprint returns what ties a key to its request: the same key with another
	// fingerprint is answered 422. Default: SHA-256 of the method, the route, the path
	// values and the body.
	Fingerprint func(c C) (string, error)
	// MaxBody bounds the request's body (413 above it) and the response's body that is
	// stored (a larger one is sent as it comes and not stored). Default: 1 MiB.
	MaxBody int64
	// Retention is how long a result is kept. Default: 24h.
	Retention time.Duration
	// LockTTL is the lease of the key's lock, renewed while the handler runs. Default:
	// DefaultLockTTL (10s), or the Locker's TTL when that is shorter.
	LockTTL time.Duration
	// MaxWait is how long a request waits while another with its key runs: 0 answers 409 at
	// once. Default: 0.
	MaxWait time.Duration
	// Keep says which results are stored. Default: status < 500.
	Keep func(status int) bool
	// ReplayHeaders are the response headers stored and replayed. Default (nil):
	// Content-Type, Content-Location and Location.
	ReplayHeaders []string
	// ErrorHandler builds the response when the request is not run or replayed. Default:
	// the adapter's default, an RFC 9457 problem document.
	ErrorHandler func(c C, err error) error
	// Label returns the label of the key's lock, as Settings.Label does. Default: the
	// request's ID (RequestLabel).
	Label func(c C) string
}

// Idempotency is checked IdempotencySettings with their defaults applied. It is never
// modified after [NewIdempotency], so one value serves concurrent requests.
type Idempotency[C Context] struct {
	skip          func(c C) bool
	locker        *fencing.Locker
	header        string
	required      bool
	scope         func(c C) (string, error)
	fingerprint   func(c C) (string, error)
	maxBody       int64
	retention     time.Duration
	lockTTL       time.Duration
	maxWait       time.Duration
	keep          func(status int) bool
	replayHeaders []string // canonical names
	errorHandler  func(c C, err error) error
	label         func(c C) string // nil: RequestLabel
	glue          Glue[C]
	try           []fencing.CallOption // a single attempt: WithTTL(lockTTL), WithMaxWait(0), WithLimit(1), UnlessMemo
	floored       bool                 // the Locker's tokens are floored at the server clock: counters may expire
}

// NewIdempotency applies the defaults to s and checks it. It returns an error wrapping
// fencing.ErrInvalid when the Locker is nil or was built with invalid options, a duration
// or MaxBody is negative, Retention or LockTTL is out of [fencing.MinTTL, fencing.MaxTTL],
// the Locker refuses LockTTL (above its counter expiry) or the header name is not a token,
// and one wrapping fencing.ErrClosed when the Locker is closed. It does not talk to Redis.
func NewIdempotency[C Context, S ~func(C) bool](g Glue[C], s IdempotencySettings[C, S]) (*Idempotency[C], error) {
	m := &Idempotency[C]{
		locker:       s.Locker,
		floored:      s.Locker != nil && s.Locker.Settings().ServerTimeFloor,
		header:       s.Header,
		required:     s.Required,
		scope:        s.Scope,
		fingerprint:  s.Fingerprint,
		maxBody:      s.MaxBody,
		retention:    s.Retention,
		maxWait:      s.MaxWait,
		keep:         s.Keep,
		errorHandler: s.ErrorHandler,
		label:        s.Label,
		glue:         g,
	}
	if s.Skipper != nil {
		m.skip = (func(C) bool)(s.Skipper)
	} else {
		m.skip = func(c C) bool { return SafeMethod(c.Request().Method, g.Query) }
	}
	if s.Locker == nil {
		return nil, invalidf("nil Locker")
	}
	switch {
	case s.MaxWait < 0:
		return nil, invalidf("negative MaxWait %v", s.MaxWait)
	case s.MaxBody < 0:
		return nil, invalidf("negative MaxBody %d", s.MaxBody)
	case s.Retention < 0:
		return nil, invalidf("negative Retention %v", s.Retention)
	case s.Retention != 0 && (s.Retention < fencing.MinTTL || s.Retention > fencing.MaxTTL):
		return nil, invalidf("Retention %v out of range [%v, %v]", s.Retention, fencing.MinTTL, fencing.MaxTTL)
	case s.LockTTL < 0:
		return nil, invalidf("negative LockTTL %v", s.LockTTL)
	case s.LockTTL != 0 && (s.LockTTL < fencing.MinTTL || s.LockTTL > fencing.MaxTTL):
		return nil, invalidf("LockTTL %v out of range [%v, %v]", s.LockTTL, fencing.MinTTL, fencing.MaxTTL)
	}
	settings := s.Locker.Settings()
	m.lockTTL = s.LockTTL
	if m.lockTTL == 0 {
		m.lockTTL = DefaultLockTTL
		if settings.TTL > 0 {
			m.lockTTL = min(m.lockTTL, settings.TTL)
		}
	}
	if settings.CounterExpiry > 0 && m.lockTTL > settings.CounterExpiry {
		// The Locker would refuse every call; say so here rather than at each request.
		return nil, invalidf("LockTTL %v above the Locker's counter expiry %v", m.lockTTL, settings.CounterExpiry)
	}
	try, err := callOptions(s.Locker, m.lockTTL, 0, 1)
	if err != nil {
		return nil, err
	}
	m.try = append(try, fencing.UnlessMemo(RecordName))
	if m.header == "" {
		m.header = DefaultIdempotencyHeader
	}
	if !token(m.header) {
		return nil, invalidf("Header %q is not a header name", m.header)
	}
	m.header = http.CanonicalHeaderKey(m.header)
	if m.fingerprint == nil {
		m.fingerprint = func(c C) (string, error) { return Fingerprint(c, g.PathValues) }
	}
	if m.maxBody == 0 {
		m.maxBody = DefaultMaxBody
	}
	if m.retention == 0 {
		m.retention = DefaultRetention
	}
	if m.keep == nil {
		m.keep = DefaultKeep
	}
	replay := s.ReplayHeaders
	if replay == nil {
		replay = DefaultReplayHeaders
	}
	for _, name := range replay {
		if !token(name) {
			return nil, invalidf("ReplayHeaders: %q is not a header name", name)
		}
		m.replayHeaders = append(m.replayHeaders, http.CanonicalHeaderKey(name))
	}
	if m.errorHandler == nil {
		m.errorHandler = g.IdempotencyErrorHandler
	}
	return m, nil
}

// DefaultKeep is the default Keep: results with a status below 500 are stored.
func DefaultKeep(status int) bool { return status < http.StatusInternalServerError }

// ToIdempotent builds the Idempotency of s with g and returns it as an Echo major's
// MiddlewareFunc M, whose HandlerFunc is H; see [NewIdempotency] for the errors.
func ToIdempotent[M ~func(next H) H, H ~func(c C) error, C Context, S ~func(C) bool](g Glue[C], s IdempotencySettings[C, S]) (M, error) {
	m, err := NewIdempotency(g, s)
	if err != nil {
		return nil, err
	}
	return middlewareOf[M](m.Serve), nil
}

// token reports whether s is an HTTP token (RFC 9110, section 5.6.2), as a header name must
// be.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0 {
			continue
		}
		return false
	}
	return true
}
