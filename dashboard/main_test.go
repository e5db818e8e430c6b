package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestMain checks that no test leaves a goroutine running: the Handler starts none that
// outlives a request.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mount is where the tests mount the Handler.
const mount = "/ops"

// env is a Handler mounted under /ops/ of a test server, on a Locker of the test's Redis.
type env struct {
	locker *fencing.Locker
	client redis.UniversalClient
	srv    *httptest.Server
	http   *http.Client
}

// newEnv mounts a Handler with opts on the test's Redis (redistest: miniredis, or the real
// Redis of FENCING_REDIS_ADDR, with a prefix of the test's own).
func newEnv(t *testing.T, opts ...dashboard.Option) *env {
	t.Helper()
	r := redistest.New(t)
	return newEnvOn(t, r.Client, r.Prefix, opts...)
}

// newEnvOn mounts a Handler with opts on a Locker of client with prefix.
func newEnvOn(t *testing.T, client redis.UniversalClient, prefix string, opts ...dashboard.Option) *env {
	t.Helper()
	locker := fencing.New(client, fencing.WithPrefix(prefix))
	t.Cleanup(func() { _ = locker.Close() })
	h := dashboard.New(locker, opts...)
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &env{locker: locker, client: client, srv: srv, http: &c}
}

// response is an answer of the Handler.
type response struct {
	code   int
	header http.Header
	body   string
}

// do sends a request for path (under the mount point) with body, the form given, and the
// headers given as name, value pairs.
func (e *env) do(t *testing.T, method, path string, form url.Values, header ...string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+mount+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, header: res.Header, body: string(b)}
}

// get sends GET path and checks the status code.
func (e *env) get(t *testing.T, path string, code int) response {
	t.Helper()
	r := e.do(t, http.MethodGet, path, nil)
	if r.code != code {
		t.Fatalf("GET %s: status %d, want %d; body:\n%s", path, r.code, code, r.body)
	}
	return r
}

// getJSON sends GET path, checks the status code and decodes the body into v.
func (e *env) getJSON(t *testing.T, path string, code int, v any) {
	t.Helper()
	r := e.get(t, path, code)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("GET %s: Content-Type %q, want JSON", path, ct)
	}
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("GET %s: %v in\n%s", path, err, r.body)
	}
}

// hold takes resource with opts and a TTL of a minute, released when the test ends.
func (e *env) hold(t *testing.T, resource string, opts ...fencing.CallOption) *fencing.Lock {
	t.Helper()
	lock, err := e.locker.TryAcquire(context.Background(), resource, append([]fencing.CallOption{fencing.WithTTL(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatalf("TryAcquire %q: %v", resource, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// queue starts an Acquire of resource with opts by another Locker, which waits behind the
// holders, and returns once the test's Locker sees n waiters queued, with a channel that
// receives the lock if the waiter gets it. A waiter that gets the resource holds it until
// the test ends; one still waiting then is cancelled.
func (e *env) queue(t *testing.T, resource string, n int, opts ...fencing.CallOption) <-chan *fencing.Lock {
	t.Helper()
	other := fencing.New(e.client, fencing.WithPrefix(e.locker.Settings().Prefix))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	got := make(chan *fencing.Lock, 1)
	go func() {
		defer close(done)
		lock, err := other.Acquire(ctx, resource, opts...)
		if err != nil {
			return
		}
		got <- lock
		<-ctx.Done()
		_ = lock.Release(context.Background())
	}()
	t.Cleanup(func() { cancel(); <-done; _ = other.Close() })
	waitFor(t, done, func() bool {
		st, err := e.locker.Inspect(context.Background(), resource)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Waiters) == n
	})
	return got
}

// waitFor returns once cond holds, polling it every 5 ms. It fails the test when done is
// closed first, or after 10 s.
func waitFor(t *testing.T, done <-chan struct{}, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-done:
			t.Fatal("the waiter returned before the condition held")
		case <-timeout:
			t.Fatal("condition not met after 10 s")
		}
	}
}

// lockJSON is a lock in the JSON forms.
type lockJSON struct {
	Resource string
	Mode     string
	Limit    int
	Holders  []struct {
		Token int64
		Label string
		Owner string
		TTLMs int64 `json:"ttl_ms"`
	}
	Waiters []struct {
		Label           string
		Locker          string
		Mode            string
		Limit           int
		Alive           bool
		WaitingMs       *int64 `json:"waiting_ms"`
		TimeFloor       bool   `json:"time_floor"`
		CounterExpiryMs int64  `json:"counter_expiry_ms"`
	}
	NextToken    int64 `json:"next_token"`
	CounterTTLMs int64 `json:"counter_ttl_ms"`
}

// listJSON is the list's JSON form.
type listJSON struct {
	Locks   []lockJSON
	Match   string
	Next    string
	Skipped []struct{ Resource, Error string }
}
