package middleware_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/echotest"
	"github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/echofencetest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
)

// The tests here cover what only Echo v5 has: its two error handlers and a handler of the
// new signature, responses read through echo.UnwrapResponse and ResolveResponseStatus,
// RouteInfo and Any routes, MiddlewareConfigurator and echotest contexts. The behaviour
// both majors share is in TestBehaviour.

var _ echo.MiddlewareConfigurator = fencemw.Config{}

// newLocker returns a Locker on the test's Redis and the Redis.
func newLocker(t *testing.T) (*fencing.Locker, *redistest.Redis) {
	t.Helper()
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	return l, r
}

// hold takes lock name for the test.
func hold(t *testing.T, l *fencing.Locker, name string) {
	t.Helper()
	lock, err := l.TryAcquire(t.Context(), name, fencing.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire %q: %v", name, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
}

// unreachable returns a Locker whose Redis refuses connections.
func unreachable(t *testing.T) *fencing.Locker {
	t.Helper()
	l := fencing.New(echofencetest.ClosedPortClient(t))
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newEcho(handler echo.HTTPErrorHandler) *echo.Echo {
	e := echo.New()
	e.Logger = slog.New(slog.DiscardHandler)
	if handler != nil {
		e.HTTPErrorHandler = handler
	}
	return e
}

func put(e *echo.Echo, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, target, nil))
	return rec
}

// TestErrorHandlers sends a busy resource (423), a request without its key (400) and an
// unreachable Redis (503) through Echo v5's two error handlers, both told to expose errors,
// and through an HTTPErrorHandler of the v5 signature: the statuses are right, Retry-After
// is kept, and no body shows a lock name, a Redis address or an error's text.
func TestErrorHandlers(t *testing.T) {
	t.Parallel()
	l, r := newLocker(t)
	hold(t, l, "/items/:id 1")
	down := unreachable(t)
	secrets := []string{r.Prefix, "fencing", "fencemw", "}:", "refused", "127.0.0.1", "X-Id", "missing"}
	routes := func(e *echo.Echo) {
		e.PUT("/items/:id", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) }, fencemw.Fence(l))
		e.PUT("/down/:id", func(c *echo.Context) error { return nil }, fencemw.Fence(down))
		e.PUT("/nokey", func(c *echo.Context) error { return nil }, fencemw.FenceWithConfig(fencemw.Config{Locker: l, KeyLookup: "header:X-Id"}))
	}
	cases := []struct {
		target string
		status int
		match  error
		detail string // the busy resource, named as the middleware locks it
	}{
		{"/items/1", http.StatusLocked, fencing.ErrNotAcquired, "/items/:id 1 is busy"},
		{"/nokey", http.StatusBadRequest, fencing.ErrInvalid, ""},
		{"/down/1", http.StatusServiceUnavailable, nil, ""},
	}

	t.Run("DefaultHTTPErrorHandler(true)", func(t *testing.T) {
		e := newEcho(echo.DefaultHTTPErrorHandler(true))
		routes(e)
		for _, tc := range cases {
			rec := put(e, tc.target)
			echofencetest.AssertMessage(t, rec, tc.status, cmp.Or(tc.detail, http.StatusText(tc.status)), secrets...)
		}
	})
	t.Run("ProblemDetailsHTTPErrorHandler(true)", func(t *testing.T) {
		e := newEcho(echo.ProblemDetailsHTTPErrorHandler(true))
		routes(e)
		for _, tc := range cases {
			rec := put(e, tc.target)
			var problem map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &problem); err != nil {
				t.Fatalf("%s: body %q: %v", tc.target, rec.Body, err)
			}
			want := map[string]any{"type": "about:blank", "title": http.StatusText(tc.status), "status": float64(tc.status)}
			if tc.detail != "" {
				want["detail"] = tc.detail
			}
			if rec.Code != tc.status || len(problem) != len(want) || problem["title"] != want["title"] ||
				problem["status"] != want["status"] || problem["type"] != want["type"] || problem["detail"] != want["detail"] {
				t.Errorf("%s: got %d %v, want %d %v", tc.target, rec.Code, problem, tc.status, want)
			}
			if ct := rec.Header().Get(echo.HeaderContentType); ct != echo.MIMEApplicationProblemJSON {
				t.Errorf("%s: got Content-Type %q, want %q", tc.target, ct, echo.MIMEApplicationProblemJSON)
			}
			echofencetest.AssertNoSecrets(t, rec.Body.String(), secrets...)
		}
	})
	t.Run("custom handler", func(t *testing.T) {
		var mu sync.Mutex
		var seen []error
		e := newEcho(func(c *echo.Context, err error) {
			mu.Lock()
			seen = append(seen, err)
			mu.Unlock()
			_ = c.JSON(echo.StatusCode(err), map[string]int{"code": echo.StatusCode(err)})
		})
		routes(e)
		for i, tc := range cases {
			rec := put(e, tc.target)
			mu.Lock()
			err := seen[i]
			mu.Unlock()
			if rec.Code != tc.status || echo.StatusCode(err) != tc.status {
				t.Errorf("%s: got status %d (echo.StatusCode %d), want %d", tc.target, rec.Code, echo.StatusCode(err), tc.status)
			}
			if tc.match != nil && !errors.Is(err, tc.match) {
				t.Errorf("%s: got error %v, want one matching %v", tc.target, err, tc.match)
			}
			if tc.status == http.StatusLocked && rec.Header().Get(echo.HeaderRetryAfter) == "" {
				t.Errorf("%s: no Retry-After with a custom error handler", tc.target)
			}
		}
	})
}

// TestResponseUnwrapping puts Echo's RequestLogger outside the middleware and a middleware
// that wraps the ResponseWriter (with Unwrap, as Echo v5 asks) between them: the logger
// reads through echo.ResolveResponseStatus the status the client gets, whether it hands
// errors to the error handler itself or not, and the headers the middleware sets reach the
// client through the wrapper.
func TestResponseUnwrapping(t *testing.T) {
	t.Parallel()
	for _, handleError := range []bool{false, true} {
		t.Run("HandleError="+strconv.FormatBool(handleError), func(t *testing.T) {
			t.Parallel()
			l, _ := newLocker(t)
			type logged struct {
				status    int
				route     string
				unwrapped bool
			}
			logs := make(chan logged, 1)
			e := newEcho(nil)
			e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
				LogStatus: true, LogRoutePath: true, HandleError: handleError,
				LogValuesFunc: func(c *echo.Context, v middleware.RequestLoggerValues) error {
					resp, err := echo.UnwrapResponse(c.Response())
					logs <- logged{v.Status, v.RoutePath, err == nil && resp != nil}
					return nil
				},
			}))
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c *echo.Context) error {
					c.SetResponse(&wrappedWriter{ResponseWriter: c.Response()})
					return next(c)
				}
			})
			e.PUT("/items/:id", func(c *echo.Context) error {
				return c.NoContent(http.StatusNoContent)
			}, fencemw.FenceWithConfig(fencemw.Config{Locker: l, TokenHeader: "Fencing-Token"}))
			e.PUT("/nokey", func(c *echo.Context) error { return nil }, fencemw.FenceWithConfig(fencemw.Config{Locker: l, KeyLookup: "header:X-Id"}))
			hold(t, l, "/items/:id 1")

			for _, tc := range []struct {
				target, route string
				status        int
				header        string
			}{
				{"/items/2", "/items/:id", http.StatusNoContent, "Fencing-Token"},
				{"/items/1", "/items/:id", http.StatusLocked, echo.HeaderRetryAfter},
				{"/nokey", "/nokey", http.StatusBadRequest, ""},
			} {
				rec := put(e, tc.target)
				got := <-logs
				if rec.Code != tc.status || got.status != tc.status {
					t.Errorf("%s: got status %d, logged %d, want %d", tc.target, rec.Code, got.status, tc.status)
				}
				if got.route != tc.route || !got.unwrapped {
					t.Errorf("%s: logged route %q (unwrapped %v), want %q and the *echo.Response", tc.target, got.route, got.unwrapped, tc.route)
				}
				if tc.header != "" && rec.Header().Get(tc.header) == "" {
					t.Errorf("%s: no %s header through the wrapped writer", tc.target, tc.header)
				}
			}
		})
	}
}

// wrappedWriter is a ResponseWriter of a middleware, which Echo v5 unwraps.
type wrappedWriter struct{ http.ResponseWriter }

func (w *wrappedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestRouteInfo checks lock names against Echo v5's routes: an Any route, which matches
// every method, unknown ones included, under the pseudo-method echo.RouteAny, a route with
// a name of its own, a group's route and a group's catch-all route.
func TestRouteInfo(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t)
	type seen struct {
		info echo.RouteInfo
		path string
	}
	infos := make(chan seen, 1)
	h := func(c *echo.Context) error {
		infos <- seen{c.RouteInfo(), c.Path()}
		return c.NoContent(http.StatusNoContent)
	}
	e := newEcho(nil)
	e.Any("/any/:id", h, fencemw.Fence(l))
	if _, err := e.AddRoute(echo.Route{Method: http.MethodPut, Path: "/named/:id", Name: "update-named", Handler: h,
		Middlewares: []echo.MiddlewareFunc{fencemw.Fence(l)}}); err != nil {
		t.Fatal(err)
	}
	e.Group("/api", fencemw.Fence(l)).PUT("/orders/:id", h)

	for _, tc := range []struct {
		method, target string
		route, key     string
		name           string
		routeMethod    string
	}{
		{"PURGE", "/any/7", "/any/:id", "7", "", echo.RouteAny},
		{http.MethodGet, "/any/8", "/any/:id", "8", "", echo.RouteAny},
		{http.MethodPut, "/named/7", "/named/:id", "7", "update-named", http.MethodPut},
		{http.MethodPut, "/api/orders/7", "/api/orders/:id", "7", "", http.MethodPut},
	} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
		if rec.Code != http.StatusNoContent {
			t.Fatalf("%s %s: got status %d, want 204", tc.method, tc.target, rec.Code)
		}
		got := <-infos
		if got.info.Path != tc.route || got.path != tc.route || got.info.Name != tc.name || got.info.Method != tc.routeMethod {
			t.Errorf("%s %s: got RouteInfo %+v and c.Path() %q, want path %q, name %q, method %q",
				tc.method, tc.target, got.info, got.path, tc.route, tc.name, tc.routeMethod)
		}
		// The lock is named after the route's path, whatever its name or method.
		hold(t, l, tc.route+" "+tc.key)
		rec = httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
		if rec.Code != http.StatusLocked {
			t.Errorf("%s %s while %q is held: got status %d, want 423", tc.method, tc.target, tc.route+" "+tc.key, rec.Code)
		}
	}

	// A group's catch-all route runs the group's middleware without a key (400), unless
	// Echo is told not to add it: then the unknown path is a plain 404.
	if rec := put(e, "/api/unknown"); rec.Code != http.StatusBadRequest {
		t.Errorf("PUT /api/unknown: got status %d, want 400", rec.Code)
	}
	plain := echo.NewWithConfig(echo.Config{NoGroupAutoRegister404Routes: true, Logger: slog.New(slog.DiscardHandler)})
	plain.Group("/api", fencemw.Fence(l)).PUT("/orders/:id", h)
	if rec := put(plain, "/api/unknown"); rec.Code != http.StatusNotFound {
		t.Errorf("PUT /api/unknown without the catch-all routes: got status %d, want 404", rec.Code)
	}
}

// TestEchotestContext runs the middleware on a context from Echo v5's echotest package, the
// way a unit test of a handler would, without routing.
func TestEchotestContext(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t)
	mw := fencemw.Fence(l)
	conf := echotest.ContextConfig{
		Request:    httptest.NewRequest(http.MethodPut, "/orders/7", nil),
		PathValues: echo.PathValues{{Name: "id", Value: "7"}},
		RouteInfo:  &echo.RouteInfo{Method: http.MethodPut, Path: "/orders/:id", Parameters: []string{"id"}},
	}
	var token int64
	handler := mw(func(c *echo.Context) error {
		token, _ = fencemw.TokenFromEcho(c)
		return c.NoContent(http.StatusNoContent)
	})
	if rec := conf.ServeWithHandler(t, handler); rec.Code != http.StatusNoContent || token < 1 {
		t.Fatalf("got status %d and token %d, want 204 and a token", rec.Code, token)
	}
	hold(t, l, "/orders/:id 7")
	conf.Request = httptest.NewRequest(http.MethodPut, "/orders/7", nil)
	conf.Response = nil
	c, rec := conf.ToContextRecorder(t)
	err := handler(c)
	if echo.StatusCode(err) != http.StatusLocked || !errors.Is(err, fencing.ErrNotAcquired) {
		t.Errorf("got error %v, want a 423 matching fencing.ErrNotAcquired", err)
	}
	if rec.Header().Get(echo.HeaderRetryAfter) == "" {
		t.Errorf("got no Retry-After header")
	}
}

// TestNewHTTPError checks the error NewHTTPError returns: its status for Echo, its cause for
// errors.Is, its text for logs, and its two bodies.
func TestNewHTTPError(t *testing.T) {
	t.Parallel()
	cause := errors.New(`fencing: not acquired: "/orders/:id 7" is held by another owner`)
	err := fencemw.NewHTTPError(http.StatusConflict, cause)
	if echo.StatusCode(err) != http.StatusConflict || !errors.Is(err, cause) {
		t.Errorf("got status %d, errors.Is %v; want 409 and true", echo.StatusCode(err), errors.Is(err, cause))
	}
	if got, want := err.Error(), "code=409, message=Conflict, err="+cause.Error(); got != want {
		t.Errorf("got text %q, want %q", got, want)
	}
	if got := fencemw.NewHTTPError(http.StatusLocked, nil).Error(); got != "code=423, message=Locked" {
		t.Errorf("without a cause: got text %q", got)
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		t.Errorf("got an *echo.HTTPError, whose Message and wrapped error Echo would expose")
	}
	body, jerr := json.Marshal(err)
	if jerr != nil || string(body) != `{"message":"Conflict"}` {
		t.Errorf("got JSON %s (%v), want {\"message\":\"Conflict\"}", body, jerr)
	}
	var pe echo.ProblemErrorer
	if !errors.As(err, &pe) || pe.ProblemError().Status != http.StatusConflict || pe.ProblemError().Detail != "" {
		t.Errorf("got no problem with status 409 and no detail")
	}
	if strings.Contains(string(body), "orders") {
		t.Errorf("the body shows the cause: %s", body)
	}
}

// TestQueryMethod checks that the QUERY method the shared code counts as safe is Echo v5's
// (echo.QUERY, RFC 10008), and that a route registered with e.QUERY runs unlocked under
// SkipSafeMethods and shares the lock under SharedSafeMethods while a writer is denied.
func TestQueryMethod(t *testing.T) {
	if echo.QUERY != echofence.MethodQuery {
		t.Fatalf("echo.QUERY is %q, echofence.MethodQuery %q", echo.QUERY, echofence.MethodQuery)
	}
	l, _ := newLocker(t)
	e := newEcho(nil)
	h := func(c *echo.Context) error {
		if _, ok := fencemw.TokenFromEcho(c); ok {
			return c.NoContent(http.StatusNoContent)
		}
		return c.NoContent(http.StatusOK)
	}
	e.QUERY("/skip/:id", h, fencemw.FenceWithConfig(fencemw.Config{Locker: l, Skipper: fencemw.SkipSafeMethods}))
	e.QUERY("/shared/:id", h, fencemw.FenceWithConfig(fencemw.Config{Locker: l, Shared: fencemw.SharedSafeMethods}))
	hold(t, l, fencemw.RouteResourceName("/skip/:id", "1"))
	reader, err := l.TryAcquire(t.Context(), fencemw.RouteResourceName("/shared/:id", "1"), fencing.Shared())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Release(context.Background()) })
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/skip/1", http.StatusOK},          // skipped, although the lock is held
		{"/shared/1", http.StatusNoContent}, // locked, beside the reader
	} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(echo.QUERY, tc.target, strings.NewReader(`{"q":1}`)))
		if rec.Code != tc.want {
			t.Errorf("QUERY %s: got %d, want %d", tc.target, rec.Code, tc.want)
		}
	}
}
