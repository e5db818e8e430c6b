package middleware

import (
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/labstack/echo/v4"
)

func TestConfig_ToMiddleware(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	good := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer good.Close()
	badOpts := fencing.New(r.Client, fencing.WithTTL(-time.Second))
	defer badOpts.Close()
	closed := fencing.New(r.Client)
	_ = closed.Close()

	tests := []struct {
		name string
		cfg  Config
		want error // nil: valid
	}{
		{"defaults", Config{Locker: good}, nil},
		{"every field", Config{Locker: good, Skipper: SkipSafeMethods, KeyLookup: "header:X-Id:Bearer ,query:id",
			Namespace: "n", TTL: time.Second, MaxWait: time.Second, ContextKey: "k", TokenHeader: "Fencing-Token",
			ErrorHandler: DefaultErrorHandler, DenyHandler: DefaultDenyHandler}, nil},
		{"extractor overrides lookup", Config{Locker: good, KeyLookup: "bogus",
			KeyExtractor: func(echo.Context) (string, error) { return "k", nil }}, nil}, // KeyLookup is ignored
		{"nil Locker", Config{}, fencing.ErrInvalid},
		{"Locker with invalid options", Config{Locker: badOpts}, fencing.ErrInvalid},
		{"closed Locker", Config{Locker: closed}, fencing.ErrClosed},
		{"TTL too short", Config{Locker: good, TTL: time.Microsecond}, fencing.ErrInvalid},
		{"TTL too long", Config{Locker: good, TTL: fencing.MaxTTL + 1}, fencing.ErrInvalid},
		{"negative TTL", Config{Locker: good, TTL: -time.Second}, fencing.ErrInvalid},
		{"negative MaxWait", Config{Locker: good, MaxWait: -1}, fencing.ErrInvalid},
		{"unknown source", Config{Locker: good, KeyLookup: "path:id"}, fencing.ErrInvalid},
		{"no name", Config{Locker: good, KeyLookup: "param:"}, fencing.ErrInvalid},
		{"no colon", Config{Locker: good, KeyLookup: "param"}, fencing.ErrInvalid},
		{"empty fallback", Config{Locker: good, KeyLookup: "param:id,"}, fencing.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := tc.cfg.ToMiddleware()
			switch {
			case tc.want == nil && (err != nil || mw == nil):
				t.Errorf("got %v, want a middleware", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("got error %v, want one matching %v", err, tc.want)
			case tc.want != nil && mw != nil:
				t.Errorf("got a middleware with error %v, want none", err)
			}
		})
	}
}

func TestFenceWithConfig_panicsOnInvalidConfig(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"Fence(nil)":                func() { Fence(nil) },
		"FenceWithConfig(Config{})": func() { FenceWithConfig(Config{}) },
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
