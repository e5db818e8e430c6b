package echofencetest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/redistest"
)

// Run runs the whole suite against d, each case as a parallel subtest named after it.
func Run(t *testing.T, d Driver) {
	all := append(cases(), idempotencyCases()...)
	for _, tc := range append(all, stalledCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, d)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, d Driver)
}

// cases returns the suite's cases.
func cases() []testCase {
	return []testCase{
		{"TokenInContextAndHeader", tokenInContextAndHeader},
		{"BadKey", badKey},
		{"ExtractorStatusErrorPassesThrough", extractorStatusErrorPassesThrough},
		{"Busy", busy},
		{"BusyRetryAfter", busyRetryAfter},
		{"MaxWait", maxWait},
		{"Limit", limit},
		{"Unavailable", unavailable},
		{"Releases", releases},
		{"ReleasesOnDisconnect", releasesOnDisconnect},
		{"LockLostCancelsContext", lockLostCancelsContext},
		{"LostLock", lostLock},
		{"LostLockForReal", lostLockForReal},
		{"ConcurrentRequestsNeverOverlap", concurrentRequestsNeverOverlap},
		{"DifferentResourcesRunInParallel", differentResourcesRunInParallel},
		{"Namespaces", namespaces},
		{"RouteNames", routeNames},
		{"DefaultConfig", defaultConfig},
		{"SkipSafeMethods", skipSafeMethods},
		{"NestedOnSameResourceIsReentrant", nestedOnSameResourceIsReentrant},
		{"ContextKeyKeptForLoggers", contextKeyKeptForLoggers},
		{"GroupUnknownPath", groupUnknownPath},
		{"ToMiddleware", toMiddleware},
		{"Constants", constants},
		{"FenceWithConfigPanicsOnInvalidConfig", fenceWithConfigPanics},
		{"ResourceNameLimit", resourceNameLimit},
		{"LockerRefusesOptions", lockerRefusesOptions},
		{"UntrustedNamesExpire", untrustedNamesExpire},
		{"SeveralResources", severalResources},
		{"SeveralResourcesNoDeadlock", severalResourcesNoDeadlock},
		{"SharedSafeMethods", sharedSafeMethods},
		{"SharedConfig", sharedConfig},
	}
}

func tokenInContextAndHeader(t *testing.T, d Driver) {
	v := newEnv(t, d)
	type seen struct {
		ctxTok, echoTok int64
		ctxOK, echoOK   bool
		get             any
		locks           int
	}
	got := make(chan seen, 1)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		var s seen
		s.ctxTok, s.ctxOK = fencing.TokenFromContext(r.Request().Context())
		s.echoTok, s.echoOK = r.Token()
		s.get = r.Get("tok")
		s.locks = len(v.lockKeys())
		got <- s
		return r.String(http.StatusOK, "ok")
	}, v.mw(Config{ContextKey: "tok", TokenHeader: "Fencing-Token"}))

	for want := int64(1); want <= 2; want++ {
		rec := v.serve(http.MethodPut, "/items/7")
		if rec.Code != http.StatusOK {
			t.Fatalf("got status %d, want 200", rec.Code)
		}
		s := <-got
		if !s.ctxOK || !s.echoOK {
			t.Fatalf("token in context: got ok %v (fencing) and %v (TokenFromEcho), want true", s.ctxOK, s.echoOK)
		}
		if s.ctxTok != s.echoTok || s.get != s.ctxTok {
			t.Errorf("got tokens %d (context), %d (TokenFromEcho), %v (c.Get), want all equal", s.ctxTok, s.echoTok, s.get)
		}
		if !redistest.Real() && s.ctxTok != want {
			t.Errorf("got token %d, want %d", s.ctxTok, want)
		}
		if h := rec.Header().Get("Fencing-Token"); h != strconv.FormatInt(s.ctxTok, 10) {
			t.Errorf("got Fencing-Token %q, want %d", h, s.ctxTok)
		}
		if s.locks != 1 {
			t.Errorf("got %d lock keys while the handler ran, want 1", s.locks)
		}
		if keys := v.lockKeys(); len(keys) != 0 {
			t.Errorf("got lock keys %q after the response, want none", keys)
		}
	}
}

func badKey(t *testing.T, d Driver) {
	v := newEnv(t, d)
	var calls atomic.Int32
	h := func(r Request) error { calls.Add(1); return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/p/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/noparam", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/h", h, v.mw(Config{KeyLookup: "header:X-Resource"}))
	v.e.Add(http.MethodPut, "/q", h, v.mw(Config{KeyLookup: "query:r,header:X-Resource"}))
	v.e.Add(http.MethodPut, "/custom", h, v.mw(Config{KeyExtractor: func(Request) (string, error) {
		return "", errors.New("no tenant")
	}}))

	long := strings.Repeat("x", d.MaxKeyLen()+1)
	tests := []struct {
		name   string
		target string
		header []string
	}{
		{"route without the parameter", "/noparam", nil},
		{"header missing", "/h", nil},
		{"header empty", "/h", []string{"X-Resource", ""}},
		{"header too long", "/h", []string{"X-Resource", long}},
		{"header not UTF-8", "/h", []string{"X-Resource", "a\xffb"}},
		{"header with control character", "/h", []string{"X-Resource", "a\x7fb"}},
		{"query and header missing", "/q", nil},
		{"query empty, no header", "/q?r=", nil},
		{"path parameter with NUL", "/p/a%00b", nil},
		{"path parameter with newline", "/p/a%0Ab", nil},
		{"path parameter too long", "/p/" + long, nil},
		{"custom extractor error", "/custom", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := v.serve(http.MethodPut, tc.target, tc.header...)
			AssertBody(t, rec, http.StatusBadRequest, "no tenant", "missing", "fencemw", "fencing")
			if err := v.lastErr(); !v.isHTTPError(err, http.StatusBadRequest) || !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("got error %v, want the middleware's 400 wrapping fencing.ErrInvalid", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	if keys := v.keys("*"); len(keys) != 0 {
		t.Errorf("got keys %q, want none", keys)
	}
	// Fallback: the header is used when the query has no value.
	if rec := v.serve(http.MethodPut, "/q?r=", "X-Resource", "a"); rec.Code != http.StatusNoContent {
		t.Errorf("query empty, header set: got status %d, want 204", rec.Code)
	}
}

func extractorStatusErrorPassesThrough(t *testing.T, d Driver) {
	v := newEnv(t, d)
	notFound := d.StatusError(http.StatusNotFound)
	v.e.Add(http.MethodPut, "/custom", func(Request) error { return nil }, v.mw(Config{
		KeyExtractor: func(Request) (string, error) { return "", notFound },
	}))
	rec := v.serve(http.MethodPut, "/custom")
	if rec.Code != http.StatusNotFound {
		t.Errorf("got status %d, want 404", rec.Code)
	}
	if err := v.lastErr(); err != notFound { //nolint:errorlint // the very value must come through
		t.Errorf("got error %v, want the extractor's error itself", err)
	}
}

func busy(t *testing.T, d Driver) {
	v := newEnv(t, d)
	var calls atomic.Int32
	h := func(r Request) error { calls.Add(1); return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/items/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodDelete, "/items/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/conflict/:id", h, v.mw(Config{DenyHandler: func(_ Request, _ string, err error) error {
		return d.NewHTTPError(http.StatusConflict, err)
	}}))

	v.hold("/items/:id", "1", 10*time.Second)
	v.hold("/conflict/:id", "1", 10*time.Second)
	// The default answer names the busy resource as the middleware locks it, and nothing of
	// its keys in Redis: no prefix, hash tag, holder or token.
	secrets := []string{v.r.Prefix, "fencing", "}:", ":lock"}
	for _, k := range v.lockKeys() {
		value := v.r.Client.Get(t.Context(), k).Val()
		owner, _, _ := strings.Cut(value, ":")
		secrets = append(secrets, k, value, owner)
	}

	for _, tc := range []struct {
		method, target string
		status         int
		message        string
	}{
		{http.MethodPut, "/items/1", http.StatusLocked, "/items/:id 1 is busy"},
		{http.MethodDelete, "/items/1", http.StatusLocked, "/items/:id 1 is busy"}, // same route, other method: same lock
		{http.MethodPut, "/conflict/1", http.StatusConflict, "Conflict"},
	} {
		rec := v.serve(tc.method, tc.target)
		AssertMessage(t, rec, tc.status, tc.message, secrets...)
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil || ra < 1 || ra > 10 {
			t.Errorf("%s %s: got Retry-After %q, want 1..10", tc.method, tc.target, rec.Header().Get("Retry-After"))
		}
		err = v.lastErr()
		if !v.isHTTPError(err, tc.status) || !errors.Is(err, fencing.ErrNotAcquired) {
			t.Errorf("%s %s: got error %v, want the middleware's %d wrapping ErrNotAcquired", tc.method, tc.target, err, tc.status)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	// Another id is free.
	if rec := v.serve(http.MethodPut, "/items/2"); rec.Code != http.StatusNoContent {
		t.Errorf("PUT /items/2: got status %d, want 204", rec.Code)
	}
}

func maxWait(t *testing.T, d Driver) {
	v := newEnv(t, d, fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	ok := func(r Request) error { return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/short/:id", ok, v.mw(Config{Namespace: "item", MaxWait: 50 * time.Millisecond}))
	v.e.Add(http.MethodPut, "/long/:id", ok, v.mw(Config{Namespace: "item", MaxWait: 10 * time.Second}))

	lock := v.hold("item", "1", 10*time.Second)
	begin := time.Now()
	rec := v.serve(http.MethodPut, "/short/1")
	if rec.Code != http.StatusLocked {
		t.Errorf("short wait: got status %d, want 423", rec.Code)
	}
	if d := time.Since(begin); d < 50*time.Millisecond {
		t.Errorf("short wait: denied after %v, want at least 50ms", d)
	}

	done := make(chan int, 1)
	go func() { done <- v.serve(http.MethodPut, "/long/1").Code }()
	// The waiter subscribes to a grant channel after its first attempt failed.
	pattern := strings.TrimSuffix(v.lockKeys()[0], "lock") + "grant*"
	eventually(t, 5*time.Second, "a waiter on "+pattern, func() bool {
		chans, _ := v.r.Client.PubSubChannels(context.Background(), pattern).Result()
		return len(chans) > 0
	})
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := recv(t, done, "the waiting request"); code != http.StatusNoContent {
		t.Errorf("long wait: got status %d, want 204", code)
	}
}

func unavailable(t *testing.T, d Driver) {
	t.Run("closed port", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		l := fencing.New(ClosedPortClient(t))
		t.Cleanup(func() { _ = l.Close() })
		v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return nil }, v.mw(Config{Locker: l}))
		rec := v.serve(http.MethodPut, "/items/1")
		AssertBody(t, rec, http.StatusServiceUnavailable, "127.0.0.1", "refused", "dial", "fencing")
		err := v.lastErr()
		if !v.isHTTPError(err, http.StatusServiceUnavailable) || errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("got error %v, want the middleware's 503 keeping the Redis error", err)
		}
		if errors.Unwrap(err) == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("got error %v without its cause, want the cause kept for logs", err)
		}
	})
	t.Run("server error", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		if v.r.Mini == nil {
			t.Skip("needs miniredis SetError")
		}
		v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return nil }, v.mw(Config{}))
		v.r.Mini.SetError("LOADING secret-detail")
		rec := v.serve(http.MethodPut, "/items/1")
		v.r.Mini.SetError("")
		AssertBody(t, rec, http.StatusServiceUnavailable, "secret-detail", "LOADING")
		if err := v.lastErr(); err == nil || !strings.Contains(err.Error(), "secret-detail") {
			t.Errorf("got error %v, want the Redis error kept internally", err)
		}
	})
	t.Run("closed Locker", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return nil }, v.mw(Config{}))
		_ = v.locker.Close()
		rec := v.serve(http.MethodPut, "/items/1")
		AssertBody(t, rec, http.StatusServiceUnavailable)
		if err := v.lastErr(); !errors.Is(err, fencing.ErrClosed) {
			t.Errorf("got error %v, want one wrapping ErrClosed", err)
		}
	})
	t.Run("custom ErrorHandler", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		l := fencing.New(ClosedPortClient(t))
		t.Cleanup(func() { _ = l.Close() })
		v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return nil }, v.mw(Config{Locker: l,
			ErrorHandler: func(r Request, err error) error {
				return r.JSON(http.StatusTeapot, map[string]string{"status": "try later"})
			}}))
		if rec := v.serve(http.MethodPut, "/items/1"); rec.Code != http.StatusTeapot {
			t.Errorf("got status %d, want 418", rec.Code)
		}
	})
}

// lockerRefusesOptions runs the middleware with a TTL (30s) longer than the Locker's counter
// expiry (1s): every call is refused, which is the server's configuration and not the
// request's fault, so the default answer is 500; a middleware with the Locker's own TTL works.
func lockerRefusesOptions(t *testing.T, d Driver) {
	v := newEnv(t, d, fencing.WithCounterExpiry(time.Second), fencing.WithTTL(time.Second))
	ok := func(r Request) error { return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/items/:id", ok, v.mw(Config{TTL: 30 * time.Second}))
	v.e.Add(http.MethodPut, "/short/:id", ok, v.mw(Config{}))
	rec := v.serve(http.MethodPut, "/items/1")
	AssertBody(t, rec, http.StatusInternalServerError, "expiry", "ttl", "fencing")
	err := v.lastErr()
	if !v.isHTTPError(err, http.StatusInternalServerError) || !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("got error %v, want the middleware's 500 matching fencing.ErrInvalid", err)
	}
	if keys := v.keys("*"); len(keys) != 0 {
		t.Errorf("got keys %q, want none", keys)
	}
	if rec := v.serve(http.MethodPut, "/short/1"); rec.Code != http.StatusNoContent {
		t.Errorf("with TTL 1s: got status %d, want 204", rec.Code)
	}
}

func releases(t *testing.T, d Driver) {
	boom := errors.New("boom")
	teapot := d.StatusError(http.StatusTeapot)
	tests := []struct {
		name    string
		handler Handler
		inner   bool // register Recover inside the fence rather than outside
		status  int
		check   func(t *testing.T, err error)
	}{
		{name: "success", handler: func(r Request) error { return r.NoContent(http.StatusNoContent) }, status: http.StatusNoContent},
		{name: "status error unchanged", handler: func(Request) error { return teapot }, status: http.StatusTeapot,
			check: func(t *testing.T, err error) {
				if err != teapot { //nolint:errorlint // the very value must come through
					t.Errorf("got error %v, want the handler's error itself", err)
				}
			}},
		{name: "plain error", handler: func(Request) error { return boom }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if err != boom { //nolint:errorlint // the very value must come through
					t.Errorf("got error %v, want the handler's error itself", err)
				}
			}},
		{name: "panic", handler: func(Request) error { panic("kaput") }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if err == nil || err.Error() != "kaput" {
					t.Errorf("got error %v, want the recovered panic", err)
				}
			}},
		{name: "panic with Recover inside", handler: func(Request) error { panic("kaput") }, inner: true, status: http.StatusInternalServerError},
		{name: "panic with an error value", handler: func(Request) error { panic(boom) }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, boom) {
					t.Errorf("got error %v, want the panic's error", err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, d)
			mws := []Middleware{v.mw(Config{})}
			if tc.inner {
				mws = append(mws, d.Recover())
			}
			v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
				if n := len(v.lockKeys()); n != 1 {
					t.Errorf("got %d lock keys in the handler, want 1", n)
				}
				return tc.handler(r)
			}, mws...)
			rec := v.serve(http.MethodPut, "/items/1")
			if rec.Code != tc.status {
				t.Errorf("got status %d, want %d", rec.Code, tc.status)
			}
			if tc.check != nil {
				tc.check(t, v.lastErr())
			}
			if keys := v.lockKeys(); len(keys) != 0 {
				t.Errorf("got lock keys %q after the request, want none", keys)
			}
			// The lock is free again: the next request gets it.
			_ = v.hold("/items/:id", "1", time.Second)
		})
	}
}

func releasesOnDisconnect(t *testing.T, d Driver) {
	v := newEnv(t, d)
	entered := make(chan struct{})
	cause := make(chan error, 1)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		ctx := r.Request().Context()
		awaitCancel(ctx, entered, cause)
		return ctx.Err()
	}, v.mw(Config{}))
	srv := httptest.NewServer(v.e)
	defer srv.Close()

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/items/1", nil)
	clientErr := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		clientErr <- err
	}()
	recv(t, entered, "the handler")
	cancel()
	if err := recv(t, clientErr, "the client"); !errors.Is(err, context.Canceled) {
		t.Errorf("client: got %v, want context.Canceled", err)
	}
	if err := recv(t, cause, "the handler's context"); !errors.Is(err, context.Canceled) {
		t.Errorf("handler: got cause %v, want context.Canceled", err)
	}
	v.waitNoLocks()
}

func lockLostCancelsContext(t *testing.T, d Driver) {
	run := func(t *testing.T, v *env, lose func()) {
		teapot := d.StatusError(http.StatusTeapot)
		entered := make(chan struct{})
		cause := make(chan error, 1)
		v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
			awaitCancel(r.Request().Context(), entered, cause)
			return teapot
		}, v.mw(Config{TTL: 300 * time.Millisecond}))
		done := make(chan int, 1)
		go func() { done <- v.serve(http.MethodPut, "/items/1").Code }()
		recv(t, entered, "the handler")
		lose()
		if err := recv(t, cause, "the handler's context"); !errors.Is(err, fencing.ErrNotHeld) {
			t.Errorf("got cause %v, want one matching fencing.ErrNotHeld", err)
		}
		// The handler's error reaches Echo as it is, not joined with the loss.
		if code := recv(t, done, "the response"); code != http.StatusTeapot {
			t.Errorf("got status %d, want the handler's 418", code)
		}
		if err := v.lastErr(); err != teapot { //nolint:errorlint // the very value must come through
			t.Errorf("got error %v, want the handler's error itself", err)
		}
	}
	t.Run("key deleted", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		run(t, v, func() {
			if err := v.r.Client.Del(t.Context(), v.lockKeys()...).Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("lease expired", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		if v.r.Mini == nil {
			t.Skip("needs miniredis FastForward: renewals keep a real lease alive")
		}
		run(t, v, func() { v.r.Mini.FastForward(time.Second) })
	})
}

func concurrentRequestsNeverOverlap(t *testing.T, d Driver) {
	const n = 32
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
	}{
		{"try once", 0},
		{"wait", 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, d, fencing.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
			store := newFencedStore()
			var inside, maxInside atomic.Int32
			v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
				in := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); in > m && !maxInside.CompareAndSwap(m, in); m = maxInside.Load() {
				}
				tok, _ := r.Token()
				// A read-modify-write with a Redis round trip in the middle widens the window.
				if err := v.r.Client.Ping(r.Request().Context()).Err(); err != nil {
					return err
				}
				if err := store.write(r.Param("id"), tok); err != nil {
					return d.NewHTTPError(http.StatusConflict, err)
				}
				return r.NoContent(http.StatusNoContent)
			}, v.mw(Config{MaxWait: tc.maxWait}))

			codes := make(chan int, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					codes <- v.serve(http.MethodPut, "/items/1").Code
				})
			}
			close(start)
			wg.Wait()
			close(codes)
			count := map[int]int{}
			for c := range codes {
				count[c]++
			}
			if s := store.staleWrites(); s != 0 {
				t.Errorf("got %d stale writes, want 0", s)
			}
			if m := maxInside.Load(); m != 1 {
				t.Errorf("got at most %d handlers inside at once, want 1", m)
			}
			ok := count[http.StatusNoContent]
			if tc.maxWait == 0 {
				if ok < 1 || ok+count[http.StatusLocked] != n {
					t.Errorf("got statuses %v, want at least one 204 and only 204 or 423", count)
				}
			} else if ok != n {
				t.Errorf("got statuses %v, want %d × 204", count, n)
			}
			toks := store.tokens("1")
			for i := 1; i < len(toks); i++ {
				if toks[i] <= toks[i-1] {
					t.Errorf("tokens not strictly increasing: %v", toks)
					break
				}
			}
			t.Logf("statuses %v", count)
			v.waitNoLocks()
		})
	}
}

func differentResourcesRunInParallel(t *testing.T, d Driver) {
	v := newEnv(t, d)
	entered := make(chan string, 2)
	both := make(chan struct{})
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		entered <- r.Param("id")
		select {
		case <-both:
			return r.NoContent(http.StatusNoContent)
		case <-time.After(10 * time.Second):
			return d.StatusError(http.StatusRequestTimeout)
		}
	}, v.mw(Config{}))
	codes := make(chan int, 2)
	for _, id := range []string{"1", "2"} {
		go func() { codes <- v.serve(http.MethodPut, "/items/"+id).Code }()
	}
	recv(t, entered, "the first handler")
	recv(t, entered, "the second handler, while the first holds its lock")
	if n := len(v.lockKeys()); n != 2 {
		t.Errorf("got %d lock keys, want 2", n)
	}
	close(both)
	for range 2 {
		if code := recv(t, codes, "a response"); code != http.StatusNoContent {
			t.Errorf("got status %d, want 204", code)
		}
	}
}

func namespaces(t *testing.T, d Driver) {
	v := newEnv(t, d)
	h := func(r Request) error { return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/a/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/b/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/c/:id", h, v.mw(Config{Namespace: "shared"}))
	v.e.Add(http.MethodPut, "/d/:id", h, v.mw(Config{Namespace: "shared"}))
	v.e.Add(http.MethodPut, "/e/:id", h, v.mw(Config{Namespace: "/a/"}))

	v.hold("/a/:id", "1", 10*time.Second)
	v.hold("shared", "1", 10*time.Second)
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/a/1", http.StatusLocked},
		{"/b/1", http.StatusNoContent}, // another route, another lock
		{"/c/1", http.StatusLocked},    // shared namespace
		{"/d/1", http.StatusLocked},    // shared namespace
		{"/e/1", http.StatusNoContent}, // Namespace "/a/" names "%2Fa/:1", not route /a/:id's lock on 1
	} {
		if rec := v.serve(http.MethodPut, tc.target); rec.Code != tc.want {
			t.Errorf("PUT %s: got status %d, want %d", tc.target, rec.Code, tc.want)
		}
	}
}

// routeNames checks the lock names of routes in groups and of Any routes: the full route
// path, prefix included, and one lock for every method of an Any route.
func routeNames(t *testing.T, d Driver) {
	v := newEnv(t, d)
	paths := make(chan string, 8)
	h := func(r Request) error { paths <- r.Path(); return r.NoContent(http.StatusNoContent) }
	api := v.e.Group("/api")
	api.Add(http.MethodPut, "/orders/:id", h, v.mw(Config{}))
	v.e.Group("/api/v2", v.mw(Config{})).Any("/orders/:id", h)
	v.e.Any("/any/:id", h, v.mw(Config{}))

	for _, tc := range []struct {
		route, target string
		methods       []string
	}{
		{"/api/orders/:id", "/api/orders/7", []string{http.MethodPut}},
		{"/api/v2/orders/:id", "/api/v2/orders/7", []string{http.MethodPut, http.MethodPost, http.MethodDelete}},
		{"/any/:id", "/any/7", []string{http.MethodGet, http.MethodPatch, "PROPFIND"}},
	} {
		for _, m := range tc.methods {
			if rec := v.serve(m, tc.target); rec.Code != http.StatusNoContent {
				t.Errorf("%s %s while free: got status %d, want 204", m, tc.target, rec.Code)
			} else if p := <-paths; p != tc.route {
				t.Errorf("%s %s: the handler saw route %q, want %q", m, tc.target, p, tc.route)
			}
		}
		lock := v.hold(tc.route, "7", 10*time.Second) // "<full route path> 7"
		for _, m := range tc.methods {
			if rec := v.serve(m, tc.target); rec.Code != http.StatusLocked {
				t.Errorf("%s %s while %q is held: got status %d, want 423", m, tc.target, lock.Resource(), rec.Code)
			}
		}
	}
}

// defaultConfig checks that DefaultConfig and the zero Config build the same lock names and
// defaults.
func defaultConfig(t *testing.T, d Driver) {
	v := newEnv(t, d)
	mw, err := d.DefaultConfig(v.locker)
	if err != nil {
		t.Fatal(err)
	}
	h := func(r Request) error { return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/x/:id", h, mw)
	v.e.Add(http.MethodPut, "/y/:id", h, d.Fence(v.locker))
	v.e.Add(http.MethodPut, "/z/:id", h, v.mw(Config{}))
	for _, route := range []string{"/x/:id", "/y/:id", "/z/:id"} {
		v.hold(route, "1", 10*time.Second)
	}
	for _, target := range []string{"/x/1", "/y/1", "/z/1"} {
		if rec := v.serve(http.MethodPut, target); rec.Code != http.StatusLocked {
			t.Errorf("PUT %s while its default lock is held: got status %d, want 423", target, rec.Code)
		}
	}
}

func skipSafeMethods(t *testing.T, d Driver) {
	v := newEnv(t, d)
	h := func(r Request) error {
		if _, ok := r.Token(); ok {
			return r.NoContent(http.StatusNoContent)
		}
		return r.NoContent(http.StatusOK)
	}
	cfg := Config{SkipSafeMethods: true}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodPost, echofence.MethodQuery} {
		v.e.Add(m, "/items/:id", h, v.mw(cfg))
	}
	query := http.StatusNoContent // locked where the major does not know QUERY (v4)
	if d.Query() {
		query = http.StatusOK
	}

	for _, tc := range []struct {
		method string
		want   int
	}{
		{http.MethodGet, http.StatusOK},
		{http.MethodHead, http.StatusOK},
		{http.MethodOptions, http.StatusOK},
		{http.MethodPut, http.StatusNoContent},
		{http.MethodPost, http.StatusNoContent},
		{echofence.MethodQuery, query},
	} {
		if rec := v.serve(tc.method, "/items/1"); rec.Code != tc.want {
			t.Errorf("%s: got status %d, want %d", tc.method, rec.Code, tc.want)
		}
	}
	v.hold("/items/:id", "1", 10*time.Second)
	if rec := v.serve(http.MethodGet, "/items/1"); rec.Code != http.StatusOK {
		t.Errorf("GET while held: got status %d, want 200", rec.Code)
	}
	if rec := v.serve(http.MethodPut, "/items/1"); rec.Code != http.StatusLocked {
		t.Errorf("PUT while held: got status %d, want 423", rec.Code)
	}
}

func nestedOnSameResourceIsReentrant(t *testing.T, d Driver) {
	v := newEnv(t, d)
	g := v.e.Group("/items", v.mw(Config{ContextKey: "outer"}))
	g.Add(http.MethodPut, "/:id", func(r Request) error {
		if n := len(v.lockKeys()); n != 1 {
			t.Errorf("got %d lock keys, want 1", n)
		}
		tok, _ := r.Token()
		if r.Get("outer") != tok || r.Get("inner") != tok {
			t.Errorf("got tokens %v (outer) and %v (inner), want both %d", r.Get("outer"), r.Get("inner"), tok)
		}
		return r.NoContent(http.StatusNoContent)
	}, v.mw(Config{ContextKey: "inner", TokenHeader: "Fencing-Token"}))
	rec := v.serve(http.MethodPut, "/items/1")
	if rec.Code != http.StatusNoContent {
		t.Errorf("got status %d, want 204", rec.Code)
	}
	if rec.Header().Get("Fencing-Token") == "" {
		t.Errorf("got no Fencing-Token header from the inner middleware")
	}
}

func contextKeyKeptForLoggers(t *testing.T, d Driver) {
	v := newEnv(t, d)
	logged := make(chan any, 1)
	v.e.Use(d.Around(func(r Request, next func() error) error {
		err := next()
		logged <- r.Get(d.DefaultContextKey())
		return err
	}))
	v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return d.StatusError(http.StatusTeapot) }, v.mw(Config{}))
	v.serve(http.MethodPut, "/items/1")
	if tok, ok := (<-logged).(int64); !ok || tok < 1 {
		t.Errorf("got %v under %q after the handler, want the token", tok, d.DefaultContextKey())
	}
}

// groupUnknownPath pins the behaviour the package docs warn about: g.Use runs the
// middleware for the group's unknown paths too, which have no key.
func groupUnknownPath(t *testing.T, d Driver) {
	v := newEnv(t, d)
	g := v.e.Group("/items", v.mw(Config{}))
	g.Add(http.MethodPut, "/:id", func(r Request) error { return r.NoContent(http.StatusNoContent) })
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/items/1", http.StatusNoContent},
		{"/items/", http.StatusBadRequest}, // the group's catch-all route "/items/*": no id
		{"/items", http.StatusBadRequest},  // the group's catch-all route "/items": no id
		{"/elsewhere", http.StatusNotFound},
		// With the catch-all routes, Echo's router gives /items/:id the id "1/unknown";
		// the lock is on the value the handler sees.
		{"/items/1/unknown", http.StatusNoContent},
	} {
		if rec := v.serve(http.MethodPut, tc.target); rec.Code != tc.want {
			t.Errorf("PUT %s: got status %d, want %d", tc.target, rec.Code, tc.want)
		}
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

// limit runs requests on a route with Limit 2: two at once, a third denied with 423 and
// Retry-After, or served once a slot frees when it may wait; and a request with another
// limit while the two hold the lock goes to ErrorHandler (500).
func limit(t *testing.T, d Driver) {
	v := newEnv(t, d, fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	var inside, most atomic.Int32
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	h := func(r Request) error {
		n := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		<-gate
		return r.NoContent(http.StatusNoContent)
	}
	v.e.Add(http.MethodPut, "/tenants/:id", h, v.mw(Config{Namespace: "tenant", Limit: 2}))
	v.e.Add(http.MethodPost, "/tenants/:id", h, v.mw(Config{Namespace: "tenant", Limit: 2, MaxWait: 10 * time.Second}))
	v.e.Add(http.MethodPatch, "/tenants/:id", h, v.mw(Config{Namespace: "tenant"})) // Limit 0: 1

	done := make(chan int, 3)
	for range 2 {
		go func() { done <- v.serve(http.MethodPut, "/tenants/7").Code }()
		recv(t, entered, "a request inside")
	}
	rec := v.serve(http.MethodPut, "/tenants/7")
	if rec.Code != http.StatusLocked || rec.Header().Get("Retry-After") == "" {
		t.Errorf("third request: got status %d, Retry-After %q; want 423 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if err := v.lastErr(); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Errorf("third request: got error %v, want ErrNotAcquired", err)
	}
	if rec := v.serve(http.MethodPatch, "/tenants/7"); rec.Code != http.StatusInternalServerError {
		t.Errorf("request with limit 1: got status %d, want 500", rec.Code)
	}
	if err := v.lastErr(); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("request with limit 1: got error %v, want ErrInvalid", err)
	}
	go func() { done <- v.serve(http.MethodPost, "/tenants/7").Code }()
	pattern := strings.TrimSuffix(v.lockKeys()[0], "lock") + "queue"
	eventually(t, 5*time.Second, "the waiting request in "+pattern, func() bool {
		return v.r.Client.LLen(context.Background(), pattern).Val() == 1
	})
	close(gate)
	for range 3 {
		if code := recv(t, done, "a request"); code != http.StatusNoContent {
			t.Errorf("got status %d, want 204", code)
		}
	}
	if m := most.Load(); m != 2 {
		t.Errorf("got at most %d requests inside at once, want 2", m)
	}
	v.waitNoLocks()
}
