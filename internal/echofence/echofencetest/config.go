package echofencetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/redistest"
)

// configLockers returns, on the test's Redis, a usable Locker, one built with invalid
// options and a closed one, all closed when the test ends.
func configLockers(t *testing.T) (r *redistest.Redis, good, badOpts, closed *fencing.Locker) {
	r = redistest.New(t)
	good = fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	badOpts = fencing.New(r.Client, fencing.WithTTL(-time.Second))
	closed = fencing.New(r.Client)
	for _, l := range []*fencing.Locker{good, badOpts, closed} {
		t.Cleanup(func() { _ = l.Close() })
	}
	_ = closed.Close()
	return r, good, badOpts, closed
}

func toMiddleware(t *testing.T, d Driver) {
	r, good, badOpts, closed := configLockers(t)
	// New accepts it, but no call with the default 30s TTL can work.
	shortExpiry := fencing.New(r.Client, fencing.WithCounterExpiry(time.Second))
	defer shortExpiry.Close()

	tests := []struct {
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := d.ToMiddleware(tc.cfg)
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

// constants checks that the adapter's exported defaults and limits are those the shared code
// applies.
func constants(t *testing.T, d Driver) {
	if d.DefaultKeyLookup() != echofence.DefaultKeyLookup || d.DefaultContextKey() != echofence.DefaultContextKey ||
		d.MaxKeyLen() != echofence.MaxKeyLen {
		t.Errorf("got DefaultKeyLookup %q, DefaultContextKey %q, MaxKeyLen %d; want %q, %q, %d",
			d.DefaultKeyLookup(), d.DefaultContextKey(), d.MaxKeyLen(),
			echofence.DefaultKeyLookup, echofence.DefaultContextKey, echofence.MaxKeyLen)
	}
}

func fenceWithConfigPanics(t *testing.T, d Driver) {
	r := redistest.New(t)
	shortExpiry := fencing.New(r.Client, fencing.WithCounterExpiry(time.Second))
	defer shortExpiry.Close()
	for name, f := range map[string]func(){
		"Fence(nil)":                func() { d.Fence(nil) },
		"FenceWithConfig(Config{})": func() { d.FenceWithConfig(Config{}) },
		// A Locker whose Err is set is refused where the middleware is built.
		"Fence(counter expiry below the TTL)":           func() { d.Fence(shortExpiry) },
		"FenceWithConfig(counter expiry below the TTL)": func() { d.FenceWithConfig(Config{Locker: shortExpiry}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, fencing.ErrInvalid) {
					t.Errorf("got panic %v, want an error matching ErrInvalid", err)
				}
			}()
			f()
		})
	}
}
