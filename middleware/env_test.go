package middleware

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"
)

// testEnv is one test's Redis, Locker and Echo. Echo runs in debug mode, so that any
// internal detail an error carries would show in a response body, and with Recover
// registered first.
type testEnv struct {
	t      *testing.T
	r      *redistest.Redis
	locker *fencing.Locker
	e      *echo.Echo

	mu   sync.Mutex
	errs []error // errors that reached Echo's error handler
}

func newTestEnv(t *testing.T, opts ...fencing.Option) *testEnv {
	t.Helper()
	r := redistest.New(t)
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	v := &testEnv{t: t, r: r, locker: l, e: newEcho()}
	v.e.HTTPErrorHandler = func(err error, c echo.Context) {
		v.mu.Lock()
		v.errs = append(v.errs, err)
		v.mu.Unlock()
		v.e.DefaultHTTPErrorHandler(err, c)
	}
	return v
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.Debug = true
	e.Logger.SetOutput(io.Discard)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	return e
}

// mw builds the middleware from cfg with the env's Locker, failing the test on error.
func (v *testEnv) mw(cfg Config) echo.MiddlewareFunc {
	v.t.Helper()
	if cfg.Locker == nil {
		cfg.Locker = v.locker
	}
	mw, err := cfg.ToMiddleware()
	if err != nil {
		v.t.Fatalf("ToMiddleware: %v", err)
	}
	return mw
}

// serve sends one request through Echo and returns the recorded response.
func (v *testEnv) serve(method, target string, header ...string) *httptest.ResponseRecorder {
	v.t.Helper()
	req := httptest.NewRequestWithContext(v.t.Context(), method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	v.e.ServeHTTP(rec, req)
	return rec
}

// lastErr returns the last error Echo's error handler saw.
func (v *testEnv) lastErr() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs[len(v.errs)-1]
}

// lockKeys returns the test's lock keys present in Redis.
func (v *testEnv) lockKeys() []string {
	v.t.Helper()
	keys, err := v.r.Client.Keys(context.Background(), v.r.Prefix+"*:lock").Result()
	if err != nil {
		v.t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// lockValue returns the value of the test's only lock key: the owner value and the token.
func (v *testEnv) lockValue() string {
	v.t.Helper()
	keys := v.lockKeys()
	if len(keys) != 1 {
		v.t.Fatalf("got lock keys %q, want exactly one", keys)
	}
	val, err := v.r.Client.Get(context.Background(), keys[0]).Result()
	if err != nil {
		v.t.Fatalf("GET %s: %v", keys[0], err)
	}
	return val
}

// waitNoLocks polls until no lock key of the test is left.
func (v *testEnv) waitNoLocks() {
	v.t.Helper()
	eventually(v.t, 5*time.Second, "no lock key left", func() bool { return len(v.lockKeys()) == 0 })
}

// hold takes the lock a request would take, for the test, and returns it: the default lock
// of route namespace when namespace starts with '/', the lock of Namespace namespace
// otherwise.
func (v *testEnv) hold(namespace, key string, ttl time.Duration) *fencing.Lock {
	v.t.Helper()
	name := qualify(namespace, key)
	if strings.HasPrefix(namespace, "/") {
		name = routeName(namespace, key)
	}
	lock, err := v.locker.TryAcquire(v.t.Context(), name, fencing.WithTTL(ttl))
	if err != nil {
		v.t.Fatalf("TryAcquire: %v", err)
	}
	v.t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// recv waits for a value on ch, failing the test after a deadline.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// closedPortClient returns a client for an address nothing listens on.
func closedPortClient(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// assertBody checks that the body is exactly the generic JSON of status, {"message": text},
// and holds none of the secrets.
func assertBody(t *testing.T, rec *httptest.ResponseRecorder, status int, secrets ...string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("got status %d, want %d (body %q)", rec.Code, status, rec.Body.String())
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got) != 1 || got["message"] != http.StatusText(status) {
		t.Errorf("got body %q, want only {\"message\": %q}", rec.Body.String(), http.StatusText(status))
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(rec.Body.String(), s) {
			t.Errorf("body %q contains %q", rec.Body.String(), s)
		}
	}
}

// isHTTPError reports whether err is an *echo.HTTPError with the code, unwrapped.
func isHTTPError(err error, code int) bool {
	he, ok := err.(*echo.HTTPError)
	return ok && he.Code == code
}
