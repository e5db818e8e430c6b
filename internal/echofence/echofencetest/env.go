package echofencetest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// env is one test's Redis, Locker and Echo.
type env struct {
	t      *testing.T
	d      Driver
	r      *redistest.Redis
	locker *fencing.Locker
	e      Echo
	log    *ErrorLog // errors that reached Echo's error handler
}

func newEnv(t *testing.T, d Driver, opts ...fencing.Option) *env {
	t.Helper()
	r := redistest.New(t)
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	log := &ErrorLog{}
	return &env{t: t, d: d, r: r, locker: l, e: d.NewEcho(log), log: log}
}

// mw builds the middleware from cfg with the env's Locker, failing the test on error.
func (v *env) mw(cfg Config) Middleware {
	v.t.Helper()
	if cfg.Locker == nil {
		cfg.Locker = v.locker
	}
	mw, err := v.d.ToMiddleware(cfg)
	if err != nil {
		v.t.Fatalf("ToMiddleware: %v", err)
	}
	return mw
}

// serve sends one request through Echo and returns the recorded response.
func (v *env) serve(method, target string, header ...string) *httptest.ResponseRecorder {
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
func (v *env) lastErr() error { return v.log.Last() }

// keys returns the test's keys in Redis that match pattern after the prefix.
func (v *env) keys(pattern string) []string {
	v.t.Helper()
	keys, err := v.r.Client.Keys(context.Background(), v.r.Prefix+pattern).Result()
	if err != nil {
		v.t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// lockKeys returns the test's lock keys of resources that someone holds (a shared or limited
// resource's key outlives its last holder, holding none).
func (v *env) lockKeys() []string {
	v.t.Helper()
	var held []string
	for _, key := range v.keys("*:lock") {
		name, ok := wire.ResourceOf(v.r.Prefix, key)
		if !ok {
			held = append(held, key)
			continue
		}
		st, err := v.locker.Inspect(context.Background(), name)
		if err != nil || len(st.Holders) > 0 {
			held = append(held, key)
		}
	}
	return held
}

// waitNoLocks polls until no lock key of the test is left.
func (v *env) waitNoLocks() {
	v.t.Helper()
	eventually(v.t, 5*time.Second, "no lock key left", func() bool { return len(v.lockKeys()) == 0 })
}

// hold takes the lock a request would take, for the test, and returns it: the default lock
// of route namespace when namespace starts with '/', the lock of Namespace namespace
// otherwise.
func (v *env) hold(namespace, key string, ttl time.Duration) *fencing.Lock {
	v.t.Helper()
	name := echofence.Qualify(namespace, key)
	if strings.HasPrefix(namespace, "/") {
		name = echofence.RouteName(namespace, key)
	}
	lock, err := v.locker.TryAcquire(v.t.Context(), name, fencing.WithTTL(ttl))
	if err != nil {
		v.t.Fatalf("TryAcquire: %v", err)
	}
	v.t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// isHTTPError reports whether err is an error of the middleware's with the code, as Echo's
// default error handler would read it.
func (v *env) isHTTPError(err error, code int) bool { return v.d.HTTPStatus(err) == code }

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

// ClosedPortClient returns a client for an address nothing listens on, closed when the
// test ends.
func ClosedPortClient(t *testing.T) *redis.Client {
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

// AssertBody checks that the body is exactly the generic JSON of status, {"message": text},
// and holds none of the secrets.
func AssertBody(t *testing.T, rec *httptest.ResponseRecorder, status int, secrets ...string) {
	t.Helper()
	AssertMessage(t, rec, status, http.StatusText(status), secrets...)
}

// AssertMessage checks that the body is exactly {"message": message}, and holds none of the
// secrets.
func AssertMessage(t *testing.T, rec *httptest.ResponseRecorder, status int, message string, secrets ...string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("got status %d, want %d (body %q)", rec.Code, status, rec.Body.String())
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got) != 1 || got["message"] != message {
		t.Errorf("got body %q, want only {\"message\": %q}", rec.Body.String(), message)
	}
	AssertNoSecrets(t, rec.Body.String(), secrets...)
}

// AssertNoSecrets checks that body holds none of the secrets.
func AssertNoSecrets(t *testing.T, body string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(body, s) {
			t.Errorf("body %q contains %q", body, s)
		}
	}
}
