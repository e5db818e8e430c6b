package echofencetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// configLockers returns, on the test's Redis, a usable Locker, one built with invalid
// options, a closed one, and one whose counter expiry (1s) is below the default TTL (30s),
// which New accepts but which no call with that TTL can use; all closed when the test ends.
func configLockers(t *testing.T) (r *redistest.Redis, good, badOpts, closed, shortExpiry *fencing.Locker) {
	r = redistest.New(t)
	good = fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	badOpts = fencing.New(r.Client, fencing.WithTTL(-time.Second))
	closed = fencing.New(r.Client)
	shortExpiry = fencing.New(r.Client, fencing.WithCounterExpiry(time.Second))
	for _, l := range []*fencing.Locker{good, badOpts, closed, shortExpiry} {
		t.Cleanup(func() { _ = l.Close() })
	}
	_ = closed.Close()
	return r, good, badOpts, closed, shortExpiry
}

func toMiddleware(t *testing.T, m Major) {
	_, good, badOpts, closed, shortExpiry := configLockers(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want error // nil: valid
	}{
		{"defaults", Config{Locker: good}, nil},
		{"every field", Config{Locker: good, SkipSafeMethods: true, KeyLookup: "header:X-Id:Bearer ,query:id",
			Namespace: "n", TTL: time.Second, MaxWait: time.Second, ContextKey: "k", TokenHeader: "Fencing-Token",
			DefaultHandlers: true}, nil},
		{"extractor overrides lookup", Config{Locker: good, KeyLookup: "bogus",
			KeyExtractor: func(Request) (string, error) { return "k", nil }}, nil}, // KeyLookup is ignored
		{"nil Locker", Config{}, fencing.ErrInvalid},
		{"Locker with invalid options", Config{Locker: badOpts}, fencing.ErrInvalid},
		{"closed Locker", Config{Locker: closed}, fencing.ErrClosed},
		{"counter expiry below the TTL", Config{Locker: shortExpiry}, fencing.ErrInvalid},
		{"TTL too short", Config{Locker: good, TTL: time.Microsecond}, fencing.ErrInvalid},
		{"TTL too long", Config{Locker: good, TTL: fencing.MaxTTL + 1}, fencing.ErrInvalid},
		{"negative TTL", Config{Locker: good, TTL: -time.Second}, fencing.ErrInvalid},
		{"negative MaxWait", Config{Locker: good, MaxWait: -1}, fencing.ErrInvalid},
		{"negative Limit", Config{Locker: good, Limit: -1}, fencing.ErrInvalid},
		{"Limit too high", Config{Locker: good, Limit: fencing.MaxLimit + 1}, fencing.ErrInvalid},
		{"Limit at the maximum", Config{Locker: good, Limit: fencing.MaxLimit}, nil},
		{"unknown source", Config{Locker: good, KeyLookup: "path:id"}, fencing.ErrInvalid},
		{"no name", Config{Locker: good, KeyLookup: "param:"}, fencing.ErrInvalid},
		{"no colon", Config{Locker: good, KeyLookup: "param"}, fencing.ErrInvalid},
		{"empty fallback", Config{Locker: good, KeyLookup: "param:id,"}, fencing.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := m.ToMiddleware(tc.cfg)
			checkBuilt(t, mw, err, tc.want)
		})
	}
}

// checkBuilt checks what a ToMiddleware returned: a middleware when want is nil, otherwise
// no middleware and an error matching want whose text is one line with one fencemw: prefix.
func checkBuilt(t *testing.T, mw Middleware, err, want error) {
	t.Helper()
	switch {
	case want == nil && (err != nil || mw == nil):
		t.Errorf("got %v, want a middleware", err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("got error %v, want one matching %v", err, want)
	case want != nil && mw != nil:
		t.Errorf("got a middleware with error %v, want none", err)
	case err != nil && (!strings.HasPrefix(err.Error(), "fencemw: ") || strings.Count(err.Error(), "fencemw") != 1 ||
		strings.Contains(err.Error(), "\n")):
		t.Errorf("got error text %q, want one line with one fencemw: prefix", err)
	}
}

// sharedConfig checks that Shared goes with neither a limit nor several resources.
func sharedConfig(t *testing.T, m Major) {
	_, l, _, _, _ := configLockers(t)
	for name, tc := range map[string]struct {
		cfg  Config
		want error
	}{
		"with Limit":         {Config{Locker: l, SharedSafeMethods: true, Limit: 3}, fencing.ErrInvalid},
		"with KeysExtractor": {Config{Locker: l, SharedSafeMethods: true, KeysExtractor: func(Request) ([]string, error) { return nil, nil }}, fencing.ErrInvalid},
		"with Limit 1":       {Config{Locker: l, SharedSafeMethods: true, Limit: 1}, nil},
	} {
		if _, err := m.ToMiddleware(tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}
}

// constants checks that the adapter's exported defaults and limits are those the shared code
// applies.
func constants(t *testing.T, m Major) {
	lookup, key, maxLen := m.Constants()
	if lookup != echofence.DefaultKeyLookup || key != echofence.DefaultContextKey || maxLen != echofence.MaxKeyLen {
		t.Errorf("got DefaultKeyLookup %q, DefaultContextKey %q, MaxKeyLen %d; want %q, %q, %d",
			lookup, key, maxLen, echofence.DefaultKeyLookup, echofence.DefaultContextKey, echofence.MaxKeyLen)
	}
}

func fenceWithConfigPanicsOnInvalidConfig(t *testing.T, m Major) {
	_, _, _, _, shortExpiry := configLockers(t)
	mustPanic(t, "an error matching ErrInvalid", func(err error) bool { return errors.Is(err, fencing.ErrInvalid) }, map[string]func(){
		"Fence(nil)":                func() { m.Fence(nil) },
		"FenceWithConfig(Config{})": func() { m.FenceWithConfig(Config{}) },
		// A Locker whose Err is set is refused where the middleware is built.
		"Fence(counter expiry below the TTL)":           func() { m.Fence(shortExpiry) },
		"FenceWithConfig(counter expiry below the TTL)": func() { m.FenceWithConfig(Config{Locker: shortExpiry}) },
	})
}

// mustPanic runs each of fs as a subtest named after it, checking that it panics with an
// error that ok accepts.
func mustPanic(t *testing.T, want string, ok func(err error) bool, fs map[string]func()) {
	for name, f := range fs {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if err, _ := recover().(error); err == nil || !ok(err) {
					t.Errorf("got panic %v, want %s", err, want)
				}
			}()
			f()
		})
	}
}

// idempotencyToMiddleware checks the configurations refused where the middleware is built,
// and that the constructors panic on them.
func idempotencyToMiddleware(t *testing.T, m Major) {
	r, good, badOpts, closed, _ := configLockers(t)
	shortLease := fencing.New(r.Client, fencing.WithTTL(time.Second), fencing.WithCounterExpiry(2*time.Second))
	defer shortLease.Close()
	for _, tc := range []struct {
		name string
		cfg  IdemConfig
		want error // nil: valid
	}{
		{"defaults", IdemConfig{Locker: good}, nil},
		{"every field", IdemConfig{Locker: good, SkipNone: true, Header: "X-Key", Required: true,
			Scope:       func(Request) (string, error) { return "", nil },
			Fingerprint: func(Request) (string, error) { return "", nil }, MaxBody: 10, Retention: fencing.MaxTTL, LockTTL: fencing.MaxTTL,
			MaxWait: time.Second, Keep: func(int) bool { return true }, ReplayHeaders: []string{"etag"},
			ErrorHandler: func(Request, error) error { return nil }}, nil},
		{"nil Locker", IdemConfig{}, fencing.ErrInvalid},
		{"Locker with invalid options", IdemConfig{Locker: badOpts}, fencing.ErrInvalid},
		{"closed Locker", IdemConfig{Locker: closed}, fencing.ErrClosed},
		{"negative MaxWait", IdemConfig{Locker: good, MaxWait: -1}, fencing.ErrInvalid},
		{"negative MaxBody", IdemConfig{Locker: good, MaxBody: -1}, fencing.ErrInvalid},
		{"negative Retention", IdemConfig{Locker: good, Retention: -time.Second}, fencing.ErrInvalid},
		{"Retention too long", IdemConfig{Locker: good, Retention: fencing.MaxTTL + time.Millisecond}, fencing.ErrInvalid},
		{"Retention too short", IdemConfig{Locker: good, Retention: time.Microsecond}, fencing.ErrInvalid},
		{"negative LockTTL", IdemConfig{Locker: good, LockTTL: -time.Second}, fencing.ErrInvalid},
		{"LockTTL too long", IdemConfig{Locker: good, LockTTL: fencing.MaxTTL + time.Millisecond}, fencing.ErrInvalid},
		{"LockTTL too short", IdemConfig{Locker: good, LockTTL: time.Microsecond}, fencing.ErrInvalid},
		// The default lease is the Locker's 1s, under its 2s counter expiry; 5s is above it.
		{"short Locker, default LockTTL", IdemConfig{Locker: shortLease}, nil},
		{"LockTTL above the counter expiry", IdemConfig{Locker: shortLease, LockTTL: 5 * time.Second}, fencing.ErrInvalid},
		{"header not a token", IdemConfig{Locker: good, Header: "Idempotency Key"}, fencing.ErrInvalid},
		{"replay header not a token", IdemConfig{Locker: good, ReplayHeaders: []string{"Location:"}}, fencing.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := m.IdempotencyToMiddleware(tc.cfg)
			checkBuilt(t, mw, err, tc.want)
		})
	}
	mustPanic(t, "the configuration's error", func(err error) bool { return strings.HasPrefix(err.Error(), "fencemw: ") }, map[string]func(){
		"Idempotent(nil)":                        func() { m.Idempotent(nil) },
		"IdempotentWithConfig(closed)":           func() { m.IdempotentWithConfig(IdemConfig{Locker: closed}) },
		"IdempotentWithConfig(negative MaxWait)": func() { m.IdempotentWithConfig(IdemConfig{Locker: good, MaxWait: -1}) },
	})
}
