package echofencetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// env is one test's Redis, Locker and Echo, which serve calls in the test's goroutine and
// send reaches through a real HTTP server. An env on another Redis (echoEnv) has r nil.
type env struct {
	t      *testing.T
	m      Major
	r      *redistest.Redis
	locker *fencing.Locker
	e      Echo
	last   atomic.Pointer[error] // the last error that reached Echo's error handler
	srv    *httptest.Server
	runs   atomic.Int32 // the runs of pay and of the handlers counted
}

// newEnv returns an env on the test's Redis, with a Locker of opts and the test's prefix.
func newEnv(t *testing.T, m Major, opts ...fencing.Option) *env {
	t.Helper()
	r := redistest.New(t)
	// A connection for every request the cases send at once: with go-redis's default pool (10
	// per CPU), a loaded machine can keep a release waiting for one past Do's release timeout,
	// which leaves the key locked without its record, as it would in production.
	o := r.Options()
	o.PoolSize = 512
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	l := fencing.New(c, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return echoEnv(t, m, r, l)
}

// echoEnv returns an env on r and l with an Echo of its own, Recover registered first.
func echoEnv(t *testing.T, m Major, r *redistest.Redis, l *fencing.Locker) *env {
	v := &env{t: t, m: m, r: r, locker: l}
	v.e = m.NewEcho(func(err error) { v.last.Store(&err) })
	v.e.Use(m.Recover())
	v.srv = httptest.NewServer(v.e)
	t.Cleanup(v.srv.Close)
	return v
}

// mw builds the middleware from cfg with the env's Locker, failing the test on error.
func (v *env) mw(cfg Config) Middleware {
	v.t.Helper()
	cfg.Locker = cmp.Or(cfg.Locker, v.locker)
	return v.must(v.m.ToMiddleware(cfg))
}

// imw builds the idempotency middleware from cfg with the env's Locker, failing the test on
// error.
func (v *env) imw(cfg IdemConfig) Middleware {
	v.t.Helper()
	cfg.Locker = cmp.Or(cfg.Locker, v.locker)
	return v.must(v.m.IdempotencyToMiddleware(cfg))
}

// must returns mw, failing the test on err.
func (v *env) must(mw Middleware, err error) Middleware {
	v.t.Helper()
	if err != nil {
		v.t.Fatalf("building the middleware: %v", err)
	}
	return mw
}

// serve sends one request through Echo, with header's name, value pairs, and returns the
// recorded response.
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

// expect serves the request and checks its status.
func (v *env) expect(method, target string, want int, header ...string) *httptest.ResponseRecorder {
	v.t.Helper()
	rec := v.serve(method, target, header...)
	if rec.Code != want {
		v.t.Errorf("%s %s: got status %d %q, want %d", method, target, rec.Code, rec.Body, want)
	}
	return rec
}

// lastErr returns the last error Echo's error handler saw.
func (v *env) lastErr() error {
	if err := v.last.Load(); err != nil {
		return *err
	}
	return nil
}

// wantErr checks that the last error Echo's error handler saw matches target and, unless
// code is 0, is the middleware's error of that status as Echo's default handler reads it.
func (v *env) wantErr(t testing.TB, code int, target error) {
	t.Helper()
	if err := v.lastErr(); (code != 0 && v.m.HTTPStatus(err) != code) || !errors.Is(err, target) {
		t.Errorf("got error %v, want the middleware's %d matching %v", err, code, target)
	}
}

// keys returns the test's keys in Redis that match pattern after the prefix.
func (v *env) keys(pattern string) []string {
	v.t.Helper()
	keys, err := v.r.Client.Keys(context.Background(), v.r.Prefix+pattern).Result()
	if err != nil {
		v.t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// records returns the test's idempotency records in Redis.
func (v *env) records() []string { return v.keys("*:idem") }

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
		if st, err := v.locker.Inspect(context.Background(), name); err != nil || len(st.Holders) > 0 {
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
func (v *env) hold(namespace, key string, opts ...fencing.CallOption) *fencing.Lock {
	v.t.Helper()
	name := echofence.Qualify(namespace, key)
	if strings.HasPrefix(namespace, "/") {
		name = echofence.RouteName(namespace, key)
	}
	lock, err := v.locker.TryAcquire(v.t.Context(), name, append([]fencing.CallOption{fencing.WithTTL(10 * time.Second)}, opts...)...)
	if err != nil {
		v.t.Fatalf("TryAcquire: %v", err)
	}
	v.t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// secrets are what no error body of the idempotency middleware may show, and keys.
func (v *env) secrets(keys ...string) []string {
	return append([]string{v.r.Prefix, "fencing", "fencemw", ":idem", "}:"}, keys...)
}

// counted returns h, counting its runs in v.runs.
func (v *env) counted(h Handler) Handler {
	return func(r Request) error { v.runs.Add(1); return h(r) }
}

// noContent is a handler that answers 204.
func noContent(r Request) error { return r.NoContent(http.StatusNoContent) }

// payment is what pay answers.
type payment struct {
	Run   int32  `json:"run"`
	Token int64  `json:"token"`
	Body  string `json:"body"`
}

// pay is the handler of most idempotency tests: it counts its runs, and answers 201 with
// the run, the token and the body, a Location (replayed) and an X-Run header (not replayed).
func (v *env) pay(r Request) error {
	n := v.runs.Add(1)
	tok, _ := r.Token()
	body, err := io.ReadAll(r.Request().Body)
	if err != nil {
		return err
	}
	r.Header().Set("Location", "/payments/"+r.Param("id"))
	r.Header().Set("X-Run", strconv.Itoa(int(n)))
	return r.JSON(http.StatusCreated, payment{Run: n, Token: tok, Body: string(body)})
}

// reply is what a client got.
type reply struct {
	status int
	header http.Header
	body   string
}

// replayed reports whether the reply is marked as replayed.
func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// fresh checks that r is the handler's own answer of status, not a replay.
func (r reply) fresh(t testing.TB, what string, status int) {
	t.Helper()
	if r.status != status || r.replayed() {
		t.Errorf("%s: got %d %q (replayed %v), want the handler's own %d", what, r.status, r.body, r.replayed(), status)
	}
}

// payment decodes the body as pay's answer.
func (r reply) payment(t testing.TB) payment {
	t.Helper()
	var p payment
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q (status %d): %v", r.body, r.status, err)
	}
	return p
}

// problem decodes the body as an RFC 9457 problem document, checks its status and returns
// its detail.
func (r reply) problem(t testing.TB) string {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q (status %d): %v", r.body, r.status, err)
	}
	if p["status"] != float64(r.status) || p["title"] != http.StatusText(r.status) || p["type"] != "about:blank" {
		t.Errorf("problem %v for status %d: want type about:blank, its status and title", p, r.status)
	}
	detail, _ := p["detail"].(string)
	return detail
}

// send sends method path with body through the server, with the Idempotency-Key key
// unless it is "", and header's name, value pairs.
func (v *env) send(method, path, key, body string, header ...string) reply {
	v.t.Helper()
	return sendTo(v.t, v.srv.Client(), v.srv.URL, method, path, key, body, header...)
}

// sendTo sends a request to the server at base.
func sendTo(t testing.TB, client *http.Client, base, method, path, key, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// sendMany runs send(i) for i in [0, n) at once and returns the replies.
func sendMany(n int, send func(i int) reply) []reply { return sendAtMost(n, n, send) }

// sendAtMost runs send(i) for i in [0, n), at most k at once, and returns the replies.
func sendAtMost(k, n int, send func(i int) reply) []reply {
	replies := make([]reply, n)
	slots := make(chan struct{}, k)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			replies[i] = send(i)
		})
	}
	wg.Wait()
	return replies
}

// sameResponse checks that got is want replayed: the same status, body and replayed
// headers, marked Idempotent-Replayed.
func sameResponse(t testing.TB, what string, want, got reply) {
	t.Helper()
	if got.status != want.status || got.body != want.body {
		t.Errorf("%s: got %d %q, want %d %q", what, got.status, got.body, want.status, want.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got.header.Get(h) != want.header.Get(h) {
			t.Errorf("%s: got %s %q, want %q", what, h, got.header.Get(h), want.header.Get(h))
		}
	}
	if !got.replayed() {
		t.Errorf("%s: not marked Idempotent-Replayed: %v", what, got.header)
	}
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

// awaitCancel closes entered, then waits for ctx to end and sends its cause, or an error
// after 10s.
func awaitCancel(ctx context.Context, entered chan<- struct{}, cause chan<- error) {
	close(entered)
	select {
	case <-ctx.Done():
		cause <- context.Cause(ctx)
	case <-time.After(10 * time.Second):
		cause <- errors.New("the request's context was not cancelled")
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
	assertMessage(t, reply{rec.Code, rec.Header(), rec.Body.String()}, status, message, secrets...)
}

// assertMessage is AssertMessage for a reply.
func assertMessage(t testing.TB, r reply, status int, message string, secrets ...string) {
	t.Helper()
	if r.status != status {
		t.Errorf("got status %d, want %d (body %q)", r.status, status, r.body)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got) != 1 || got["message"] != message {
		t.Errorf("got body %q, want only {\"message\": %q}", r.body, message)
	}
	AssertNoSecrets(t, r.body, secrets...)
}

// AssertNoSecrets checks that body holds none of the secrets.
func AssertNoSecrets(t testing.TB, body string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(body, s) {
			t.Errorf("body %q contains %q", body, s)
		}
	}
}

// Acquisitions counts the locks a Locker takes: give WithHooks(a.Hooks()) to fencing.New.
type Acquisitions struct{ n atomic.Int64 }

// Hooks returns the hooks that count.
func (a *Acquisitions) Hooks() observe.Hooks {
	return observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if (e.Op == observe.OpAcquire || e.Op == observe.OpTryAcquire) && e.Outcome == observe.OutcomeAcquired {
			a.n.Add(1)
		}
	}}
}

// Load returns the locks taken so far.
func (a *Acquisitions) Load() int64 { return a.n.Load() }

// check reports got != want as an error about what.
func check[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}
