package middleware

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
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func TestFence_tokenInContextAndHeader(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	type seen struct {
		ctxTok, echoTok int64
		ctxOK, echoOK   bool
		get             any
		locks           int
	}
	got := make(chan seen, 1)
	v.e.PUT("/items/:id", func(c echo.Context) error {
		var s seen
		s.ctxTok, s.ctxOK = fencing.TokenFromContext(c.Request().Context())
		s.echoTok, s.echoOK = TokenFromEcho(c)
		s.get = c.Get("tok")
		s.locks = len(v.lockKeys())
		got <- s
		return c.String(http.StatusOK, "ok")
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

func TestFence_badKey(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	var calls atomic.Int32
	h := func(c echo.Context) error { calls.Add(1); return c.NoContent(http.StatusNoContent) }
	v.e.PUT("/p/:id", h, v.mw(Config{}))
	v.e.PUT("/noparam", h, v.mw(Config{}))
	v.e.PUT("/h", h, v.mw(Config{KeyLookup: "header:X-Resource"}))
	v.e.PUT("/q", h, v.mw(Config{KeyLookup: "query:r,header:X-Resource"}))
	v.e.PUT("/custom", h, v.mw(Config{KeyExtractor: func(c echo.Context) (string, error) {
		return "", errors.New("no tenant")
	}}))

	long := strings.Repeat("x", MaxKeyLen+1)
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
			assertBody(t, rec, http.StatusBadRequest, "no tenant", "missing", "fencemw", "fencing")
			if err := v.lastErr(); !isHTTPError(err, http.StatusBadRequest) || !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("got error %v, want an *echo.HTTPError 400 wrapping fencing.ErrInvalid", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	if keys := v.lockKeys(); len(keys) != 0 {
		t.Errorf("got lock keys %q, want none", keys)
	}
	// Fallback: the header is used when the query has no value.
	if rec := v.serve(http.MethodPut, "/q?r=", "X-Resource", "a"); rec.Code != http.StatusNoContent {
		t.Errorf("query empty, header set: got status %d, want 204", rec.Code)
	}
}

func TestFence_extractorHTTPErrorPassesThrough(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	v.e.PUT("/custom", func(c echo.Context) error { return nil }, v.mw(Config{
		KeyExtractor: func(c echo.Context) (string, error) { return "", echo.ErrNotFound },
	}))
	rec := v.serve(http.MethodPut, "/custom")
	if rec.Code != http.StatusNotFound {
		t.Errorf("got status %d, want 404", rec.Code)
	}
}

func TestFence_busy(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	var calls atomic.Int32
	h := func(c echo.Context) error { calls.Add(1); return c.NoContent(http.StatusNoContent) }
	v.e.PUT("/items/:id", h, v.mw(Config{}))
	v.e.DELETE("/items/:id", h, v.mw(Config{}))
	v.e.PUT("/conflict/:id", h, v.mw(Config{DenyHandler: func(c echo.Context, _ string, err error) error {
		return NewHTTPError(http.StatusConflict, err)
	}}))

	v.hold("/items/:id", "1", 10*time.Second)
	v.hold("/conflict/:id", "1", 10*time.Second)
	secrets := []string{v.r.Prefix, "/items", "fencing", "%3A"}
	for _, k := range v.lockKeys() {
		value := v.r.Client.Get(t.Context(), k).Val()
		owner, _, _ := strings.Cut(value, ":")
		secrets = append(secrets, k, value, owner)
	}

	for _, tc := range []struct {
		method, target string
		status         int
	}{
		{http.MethodPut, "/items/1", http.StatusLocked},
		{http.MethodDelete, "/items/1", http.StatusLocked}, // same route, other method: same lock
		{http.MethodPut, "/conflict/1", http.StatusConflict},
	} {
		rec := v.serve(tc.method, tc.target)
		assertBody(t, rec, tc.status, secrets...)
		ra, err := strconv.Atoi(rec.Header().Get(echo.HeaderRetryAfter))
		if err != nil || ra < 1 || ra > 10 {
			t.Errorf("%s %s: got Retry-After %q, want 1..10", tc.method, tc.target, rec.Header().Get(echo.HeaderRetryAfter))
		}
		err = v.lastErr()
		if !isHTTPError(err, tc.status) || !errors.Is(err, fencing.ErrNotAcquired) {
			t.Errorf("%s %s: got error %v, want an *echo.HTTPError %d wrapping ErrNotAcquired", tc.method, tc.target, err, tc.status)
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

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	for _, tc := range []struct {
		ttl  time.Duration
		want int
	}{
		{999 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{10 * time.Second, 10},
	} {
		lock := v.hold("ra", tc.ttl.String(), tc.ttl)
		_, err := v.locker.TryAcquire(t.Context(), lock.Resource())
		if !errors.Is(err, fencing.ErrNotAcquired) {
			t.Fatalf("ttl %v: got %v, want ErrNotAcquired", tc.ttl, err)
		}
		got, _ := strconv.Atoi(retryAfter(err))
		low := tc.want
		if redistest.Real() {
			low = 1 // time passes on a real server
		}
		if got < low || got > tc.want {
			t.Errorf("ttl %v: got Retry-After %d, want %d..%d", tc.ttl, got, low, tc.want)
		}
	}
	if got := retryAfter(errors.New("no figure")); got != "1" {
		t.Errorf("error without a TTL: got Retry-After %q, want \"1\"", got)
	}
}

func TestFence_maxWait(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t, fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	v.e.PUT("/short/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		v.mw(Config{Namespace: "item", MaxWait: 50 * time.Millisecond}))
	v.e.PUT("/long/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		v.mw(Config{Namespace: "item", MaxWait: 10 * time.Second}))

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
	// The waiter subscribes to the grant channel after its first attempt failed.
	channel := strings.TrimSuffix(v.lockKeys()[0], "lock") + "grant"
	eventually(t, 5*time.Second, "a waiter on "+channel, func() bool {
		n, _ := v.r.Client.PubSubNumSub(context.Background(), channel).Result()
		return n[channel] > 0
	})
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := recv(t, done, "the waiting request"); code != http.StatusNoContent {
		t.Errorf("long wait: got status %d, want 204", code)
	}
}

func TestFence_unavailable(t *testing.T) {
	t.Parallel()
	t.Run("closed port", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		l := fencing.New(closedPortClient(t))
		t.Cleanup(func() { _ = l.Close() })
		v.e.PUT("/items/:id", func(c echo.Context) error { return nil }, v.mw(Config{Locker: l}))
		rec := v.serve(http.MethodPut, "/items/1")
		assertBody(t, rec, http.StatusServiceUnavailable, "127.0.0.1", "refused", "dial", "fencing")
		if err := v.lastErr(); !isHTTPError(err, http.StatusServiceUnavailable) || errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("got error %v, want an *echo.HTTPError 503 keeping the Redis error", err)
		}
		if he, _ := v.lastErr().(*echo.HTTPError); he == nil || he.Internal == nil {
			t.Errorf("got no internal error, want the cause kept for logs")
		}
	})
	t.Run("server error", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		if v.r.Mini == nil {
			t.Skip("needs miniredis SetError")
		}
		v.e.PUT("/items/:id", func(c echo.Context) error { return nil }, v.mw(Config{}))
		v.r.Mini.SetError("LOADING secret-detail")
		rec := v.serve(http.MethodPut, "/items/1")
		v.r.Mini.SetError("")
		assertBody(t, rec, http.StatusServiceUnavailable, "secret-detail", "LOADING")
		if err := v.lastErr(); err == nil || !strings.Contains(err.Error(), "secret-detail") {
			t.Errorf("got error %v, want the Redis error kept internally", err)
		}
	})
	t.Run("closed Locker", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		v.e.PUT("/items/:id", func(c echo.Context) error { return nil }, v.mw(Config{}))
		_ = v.locker.Close()
		rec := v.serve(http.MethodPut, "/items/1")
		assertBody(t, rec, http.StatusServiceUnavailable)
		if err := v.lastErr(); !errors.Is(err, fencing.ErrClosed) {
			t.Errorf("got error %v, want one wrapping ErrClosed", err)
		}
	})
	t.Run("custom ErrorHandler", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		l := fencing.New(closedPortClient(t))
		t.Cleanup(func() { _ = l.Close() })
		v.e.PUT("/items/:id", func(c echo.Context) error { return nil }, v.mw(Config{Locker: l,
			ErrorHandler: func(c echo.Context, err error) error {
				return c.JSON(http.StatusTeapot, map[string]string{"status": "try later"})
			}}))
		if rec := v.serve(http.MethodPut, "/items/1"); rec.Code != http.StatusTeapot {
			t.Errorf("got status %d, want 418", rec.Code)
		}
	})
}

func TestFence_releases(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		handler echo.HandlerFunc
		inner   bool // register Recover inside the fence rather than outside
		status  int
		check   func(t *testing.T, err error)
	}{
		{name: "success", handler: func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, status: http.StatusNoContent},
		{name: "HTTPError unchanged", handler: func(c echo.Context) error { return echo.ErrTeapot }, status: http.StatusTeapot,
			check: func(t *testing.T, err error) {
				if err != echo.ErrTeapot { //nolint:errorlint // the very value must come through
					t.Errorf("got error %v, want echo.ErrTeapot itself", err)
				}
			}},
		{name: "plain error", handler: func(c echo.Context) error { return boom }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if err != boom { //nolint:errorlint // the very value must come through
					t.Errorf("got error %v, want the handler's error itself", err)
				}
			}},
		{name: "panic", handler: func(c echo.Context) error { panic("kaput") }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if err == nil || err.Error() != "kaput" {
					t.Errorf("got error %v, want the recovered panic", err)
				}
			}},
		{name: "panic with Recover inside", handler: func(c echo.Context) error { panic("kaput") }, inner: true, status: http.StatusInternalServerError},
		{name: "panic with an error value", handler: func(c echo.Context) error { panic(boom) }, status: http.StatusInternalServerError,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, boom) {
					t.Errorf("got error %v, want the panic's error", err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newTestEnv(t)
			mws := []echo.MiddlewareFunc{v.mw(Config{})}
			if tc.inner {
				mws = append(mws, middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
			}
			v.e.PUT("/items/:id", func(c echo.Context) error {
				if n := len(v.lockKeys()); n != 1 {
					t.Errorf("got %d lock keys in the handler, want 1", n)
				}
				return tc.handler(c)
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

func TestFence_releasesOnDisconnect(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	entered := make(chan struct{})
	cause := make(chan error, 1)
	v.e.PUT("/items/:id", func(c echo.Context) error {
		ctx := c.Request().Context()
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

func TestFence_lockLostCancelsContext(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, v *testEnv, lose func()) {
		entered := make(chan struct{})
		cause := make(chan error, 1)
		v.e.PUT("/items/:id", func(c echo.Context) error {
			awaitCancel(c.Request().Context(), entered, cause)
			return echo.ErrTeapot
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
		if err := v.lastErr(); err != echo.ErrTeapot { //nolint:errorlint // the very value must come through
			t.Errorf("got error %v, want echo.ErrTeapot itself", err)
		}
	}
	t.Run("key deleted", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		run(t, v, func() {
			if err := v.r.Client.Del(t.Context(), v.lockKeys()...).Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("lease expired", func(t *testing.T) {
		t.Parallel()
		v := newTestEnv(t)
		if v.r.Mini == nil {
			t.Skip("needs miniredis FastForward: renewals keep a real lease alive")
		}
		run(t, v, func() { v.r.Mini.FastForward(time.Second) })
	})
}

func TestFence_concurrentRequestsNeverOverlap(t *testing.T) {
	t.Parallel()
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
			v := newTestEnv(t, fencing.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
			store := newFencedStore()
			var inside, maxInside atomic.Int32
			v.e.PUT("/items/:id", func(c echo.Context) error {
				in := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); in > m && !maxInside.CompareAndSwap(m, in); m = maxInside.Load() {
				}
				tok, _ := TokenFromEcho(c)
				// A read-modify-write with a Redis round trip in the middle widens the window.
				if err := v.r.Client.Ping(c.Request().Context()).Err(); err != nil {
					return err
				}
				if err := store.write(c.Param("id"), tok); err != nil {
					return echo.ErrConflict.WithInternal(err)
				}
				return c.NoContent(http.StatusNoContent)
			}, v.mw(Config{MaxWait: tc.maxWait}))

			codes := make(chan int, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes <- v.serve(http.MethodPut, "/items/1").Code
				}()
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

func TestFence_differentResourcesRunInParallel(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	entered := make(chan string, 2)
	both := make(chan struct{})
	v.e.PUT("/items/:id", func(c echo.Context) error {
		entered <- c.Param("id")
		select {
		case <-both:
			return c.NoContent(http.StatusNoContent)
		case <-time.After(10 * time.Second):
			return echo.ErrRequestTimeout
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

func TestFence_namespaces(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	h := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	v.e.PUT("/a/:id", h, v.mw(Config{}))
	v.e.PUT("/b/:id", h, v.mw(Config{}))
	v.e.PUT("/c/:id", h, v.mw(Config{Namespace: "shared"}))
	v.e.PUT("/d/:id", h, v.mw(Config{Namespace: "shared"}))
	v.e.PUT("/e/:id", h, v.mw(Config{Namespace: "/a/"}))

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

func TestQualify(t *testing.T) {
	t.Parallel()
	tests := []struct{ ns, key, want string }{
		{"order", "42", "order:42"},
		{"/orders/:id", "42", "%2Forders/%3Aid:42"},
		{"a/b", "c", "a/b:c"},
		{"a%3Ab", "c", "a%253Ab:c"},
		{"", "k", ":k"},
	}
	for _, tc := range tests {
		if got := qualify(tc.ns, tc.key); got != tc.want {
			t.Errorf("qualify(%q, %q) = %q, want %q", tc.ns, tc.key, got, tc.want)
		}
	}
	// Different pairs never collide, whatever the key holds.
	pairs := [][2]string{{"a", "b:c"}, {"a:b", "c"}, {"a%3Ab", "c"}, {"a", "%3Ab:c"}, {"a:", "b:c"}, {"a", ":b:c"},
		{"/a/", ":id 1"}, {"%2Fa/", ":id 1"}, {"/a", "b"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := qualify(p[0], p[1])
		if q, dup := seen[name]; dup {
			t.Errorf("qualify%q and qualify%q both give %q", q, p, name)
		}
		if strings.HasPrefix(name, "/") {
			t.Errorf("qualify%q = %q starts with '/', as default route names do", p, name)
		}
		seen[name] = p
	}
}

func TestRouteName(t *testing.T) {
	t.Parallel()
	tests := []struct{ route, key, want string }{
		{"/orders/:id", "42", "/orders/:id 42"},
		{"/orders/:id", "a b:c", "/orders/:id a b:c"},
		{"/a b/:id", "c", "/a%20b/:id c"},
		{"/100%/:id", "c", "/100%25/:id c"},
		{"", "k", "/ k"},
		{"x", "k", "/x k"},
	}
	for _, tc := range tests {
		if got := routeName(tc.route, tc.key); got != tc.want {
			t.Errorf("routeName(%q, %q) = %q, want %q", tc.route, tc.key, got, tc.want)
		}
	}
	// Different pairs never collide, whatever the key holds.
	pairs := [][2]string{{"/a", "b c"}, {"/a b", "c"}, {"/a%20b", "c"}, {"/a", "%20b c"}, {"/a ", "b c"}, {"/a", " b c"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := routeName(p[0], p[1])
		if q, dup := seen[name]; dup {
			t.Errorf("routeName%q and routeName%q both give %q", q, p, name)
		}
		seen[name] = p
	}
}

// TestDefaultConfig checks that DefaultConfig and the zero Config build the same lock
// names and defaults.
func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	config := DefaultConfig
	config.Locker = v.locker
	h := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	v.e.PUT("/x/:id", h, v.mw(config))
	v.e.PUT("/y/:id", h, Fence(v.locker))
	v.hold("/x/:id", "1", 10*time.Second)
	v.hold("/y/:id", "1", 10*time.Second)
	for _, target := range []string{"/x/1", "/y/1"} {
		if rec := v.serve(http.MethodPut, target); rec.Code != http.StatusLocked {
			t.Errorf("PUT %s while its default lock is held: got status %d, want 423", target, rec.Code)
		}
	}
}

func TestFence_skipSafeMethods(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	h := func(c echo.Context) error {
		if _, ok := TokenFromEcho(c); ok {
			return c.NoContent(http.StatusNoContent)
		}
		return c.NoContent(http.StatusOK)
	}
	cfg := Config{Skipper: SkipSafeMethods}
	v.e.GET("/items/:id", h, v.mw(cfg))
	v.e.HEAD("/items/:id", h, v.mw(cfg))
	v.e.PUT("/items/:id", h, v.mw(cfg))
	v.e.POST("/items/:id", h, v.mw(cfg))

	for _, tc := range []struct {
		method string
		want   int
	}{
		{http.MethodGet, http.StatusOK},
		{http.MethodHead, http.StatusOK},
		{http.MethodPut, http.StatusNoContent},
		{http.MethodPost, http.StatusNoContent},
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

func TestFence_nestedOnSameResourceIsReentrant(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	g := v.e.Group("/items", v.mw(Config{ContextKey: "outer"}))
	g.PUT("/:id", func(c echo.Context) error {
		if n := len(v.lockKeys()); n != 1 {
			t.Errorf("got %d lock keys, want 1", n)
		}
		tok, _ := TokenFromEcho(c)
		if c.Get("outer") != tok || c.Get("inner") != tok {
			t.Errorf("got tokens %v (outer) and %v (inner), want both %d", c.Get("outer"), c.Get("inner"), tok)
		}
		return c.NoContent(http.StatusNoContent)
	}, v.mw(Config{ContextKey: "inner", TokenHeader: "Fencing-Token"}))
	rec := v.serve(http.MethodPut, "/items/1")
	if rec.Code != http.StatusNoContent {
		t.Errorf("got status %d, want 204", rec.Code)
	}
	if rec.Header().Get("Fencing-Token") == "" {
		t.Errorf("got no Fencing-Token header from the inner middleware")
	}
}

func TestFence_contextKeyKeptForLoggers(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	logged := make(chan any, 1)
	v.e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			logged <- c.Get(DefaultContextKey)
			return err
		}
	})
	v.e.PUT("/items/:id", func(c echo.Context) error { return echo.ErrTeapot }, v.mw(Config{}))
	v.serve(http.MethodPut, "/items/1")
	if tok, ok := (<-logged).(int64); !ok || tok < 1 {
		t.Errorf("got %v under %q after the handler, want the token", tok, DefaultContextKey)
	}
}

// TestFence_groupUnknownPath pins the behaviour doc.go warns about: g.Use runs the
// middleware for the group's unknown paths too, which have no key.
func TestFence_groupUnknownPath(t *testing.T) {
	t.Parallel()
	v := newTestEnv(t)
	g := v.e.Group("/items", v.mw(Config{}))
	g.PUT("/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
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
