package echofencetest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

func tokenInContextAndHeader(t *testing.T, m Major) {
	v := newEnv(t, m)
	var tok int64 // the handler runs in the test's goroutine (serve)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		ctxTok, ctxOK := fencing.TokenFromContext(r.Request().Context())
		echoTok, echoOK := r.Token()
		if !ctxOK || !echoOK {
			t.Errorf("token in context: got ok %v (fencing) and %v (TokenFromEcho), want true", ctxOK, echoOK)
		}
		if ctxTok != echoTok || r.Get("tok") != ctxTok {
			t.Errorf("got tokens %d (context), %d (TokenFromEcho), %v (c.Get), want all equal", ctxTok, echoTok, r.Get("tok"))
		}
		check(t, "lock keys while the handler ran", len(v.lockKeys()), 1)
		tok = ctxTok
		return r.String(http.StatusOK, "ok")
	}, v.mw(Config{ContextKey: "tok", TokenHeader: "Fencing-Token"}))

	for want := int64(1); want <= 2; want++ {
		rec := v.expect(http.MethodPut, "/items/7", http.StatusOK)
		if !redistest.Real() && tok != want {
			t.Errorf("got token %d, want %d", tok, want)
		}
		check(t, "Fencing-Token", rec.Header().Get("Fencing-Token"), strconv.FormatInt(tok, 10))
		check(t, "lock keys after the response", len(v.lockKeys()), 0)
	}
}

func badKey(t *testing.T, m Major) {
	v := newEnv(t, m)
	h := v.counted(noContent)
	v.e.Add(http.MethodPut, "/p/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/noparam", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/h", h, v.mw(Config{KeyLookup: "header:X-Resource"}))
	v.e.Add(http.MethodPut, "/q", h, v.mw(Config{KeyLookup: "query:r,header:X-Resource"}))
	v.e.Add(http.MethodPut, "/custom", h, v.mw(Config{KeyExtractor: func(Request) (string, error) {
		return "", errors.New("no tenant")
	}}))

	_, _, maxKeyLen := m.Constants()
	long := strings.Repeat("x", maxKeyLen+1)
	for _, tc := range []struct {
		name, target string
		header       []string
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			AssertBody(t, v.serve(http.MethodPut, tc.target, tc.header...), http.StatusBadRequest, "no tenant", "missing", "fencemw", "fencing")
			v.wantErr(t, http.StatusBadRequest, fencing.ErrInvalid)
		})
	}
	check(t, "handler runs", v.runs.Load(), 0)
	check(t, "keys in Redis", len(v.keys("*")), 0)
	v.expect(http.MethodPut, "/q?r=", http.StatusNoContent, "X-Resource", "a") // the header, when the query has no value
}

func extractorStatusErrorPassesThrough(t *testing.T, m Major) {
	v := newEnv(t, m)
	notFound := m.StatusError(http.StatusNotFound)
	v.e.Add(http.MethodPut, "/custom", noContent, v.mw(Config{
		KeyExtractor: func(Request) (string, error) { return "", notFound },
	}))
	v.expect(http.MethodPut, "/custom", http.StatusNotFound)
	if err := v.lastErr(); err != notFound { //nolint:errorlint // the very value must come through
		t.Errorf("got error %v, want the extractor's error itself", err)
	}
}

func busy(t *testing.T, m Major) {
	v := newEnv(t, m)
	h := v.counted(noContent)
	v.e.Add(http.MethodPut, "/items/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodDelete, "/items/:id", h, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/conflict/:id", h, v.mw(Config{DenyHandler: func(_ Request, _ string, err error) error {
		return m.NewHTTPError(http.StatusConflict, err)
	}}))

	v.hold("/items/:id", "1")
	v.hold("/conflict/:id", "1")
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
		if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
			t.Errorf("%s %s: got Retry-After %q, want 1..10", tc.method, tc.target, rec.Header().Get("Retry-After"))
		}
		v.wantErr(t, tc.status, fencing.ErrNotAcquired)
	}
	check(t, "handler runs", v.runs.Load(), 0)
	v.expect(http.MethodPut, "/items/2", http.StatusNoContent) // another id is free
}

func maxWait(t *testing.T, m Major) {
	v := newEnv(t, m, fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	v.e.Add(http.MethodPut, "/short/:id", noContent, v.mw(Config{Namespace: "item", MaxWait: 50 * time.Millisecond}))
	v.e.Add(http.MethodPut, "/long/:id", noContent, v.mw(Config{Namespace: "item", MaxWait: 10 * time.Second}))

	lock := v.hold("item", "1")
	begin := time.Now()
	v.expect(http.MethodPut, "/short/1", http.StatusLocked)
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
	check(t, "long wait: status", recv(t, done, "the waiting request"), http.StatusNoContent)
}

// limit runs requests on a route with Limit 2: two at once, a third denied with 423 and
// Retry-After, or served once a slot frees when it may wait; and a request with another
// limit while the two hold the lock goes to ErrorHandler (500).
func limit(t *testing.T, m Major) {
	v := newEnv(t, m, fencing.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	var inside, most atomic.Int32
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	h := func(r Request) error {
		n := inside.Add(1)
		defer inside.Add(-1)
		for x := most.Load(); n > x && !most.CompareAndSwap(x, n); x = most.Load() {
		}
		entered <- struct{}{}
		<-gate
		return noContent(r)
	}
	v.e.Add(http.MethodPut, "/tenants/:id", h, v.mw(Config{Namespace: "tenant", Limit: 2}))
	v.e.Add(http.MethodPost, "/tenants/:id", h, v.mw(Config{Namespace: "tenant", Limit: 2, MaxWait: 10 * time.Second}))
	v.e.Add(http.MethodPatch, "/tenants/:id", h, v.mw(Config{Namespace: "tenant"})) // Limit 0: 1

	done := make(chan int, 3)
	for range 2 {
		go func() { done <- v.serve(http.MethodPut, "/tenants/7").Code }()
		recv(t, entered, "a request inside")
	}
	if rec := v.expect(http.MethodPut, "/tenants/7", http.StatusLocked); rec.Header().Get("Retry-After") == "" {
		t.Errorf("third request: got no Retry-After, want one")
	}
	v.wantErr(t, 0, fencing.ErrNotAcquired)
	v.expect(http.MethodPatch, "/tenants/7", http.StatusInternalServerError) // another limit
	v.wantErr(t, 0, fencing.ErrInvalid)
	go func() { done <- v.serve(http.MethodPost, "/tenants/7").Code }()
	pattern := strings.TrimSuffix(v.lockKeys()[0], "lock") + "queue"
	eventually(t, 5*time.Second, "the waiting request in "+pattern, func() bool {
		return v.r.Client.LLen(context.Background(), pattern).Val() == 1
	})
	close(gate)
	for range 3 {
		check(t, "status", recv(t, done, "a request"), http.StatusNoContent)
	}
	check(t, "most requests inside at once", most.Load(), 2)
	v.waitNoLocks()
}

func unavailable(t *testing.T, m Major) {
	down := func(t *testing.T) *fencing.Locker {
		l := fencing.New(ClosedPortClient(t))
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	parallel(t, m, "closed port", func(t *testing.T, v *env) {
		v.e.Add(http.MethodPut, "/items/:id", noContent, v.mw(Config{Locker: down(t)}))
		AssertBody(t, v.serve(http.MethodPut, "/items/1"), http.StatusServiceUnavailable, "127.0.0.1", "refused", "dial", "fencing")
		err := v.lastErr()
		if v.m.HTTPStatus(err) != http.StatusServiceUnavailable || errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("got error %v, want the middleware's 503 keeping the Redis error", err)
		}
		if errors.Unwrap(err) == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("got error %v without its cause, want the cause kept for logs", err)
		}
	})
	parallel(t, m, "server error", func(t *testing.T, v *env) {
		if v.r.Mini == nil {
			t.Skip("needs miniredis SetError")
		}
		v.e.Add(http.MethodPut, "/items/:id", noContent, v.mw(Config{}))
		v.r.Mini.SetError("LOADING secret-detail")
		rec := v.serve(http.MethodPut, "/items/1")
		v.r.Mini.SetError("")
		AssertBody(t, rec, http.StatusServiceUnavailable, "secret-detail", "LOADING")
		if err := v.lastErr(); err == nil || !strings.Contains(err.Error(), "secret-detail") {
			t.Errorf("got error %v, want the Redis error kept internally", err)
		}
	})
	parallel(t, m, "closed Locker", func(t *testing.T, v *env) {
		v.e.Add(http.MethodPut, "/items/:id", noContent, v.mw(Config{}))
		_ = v.locker.Close()
		AssertBody(t, v.serve(http.MethodPut, "/items/1"), http.StatusServiceUnavailable)
		v.wantErr(t, 0, fencing.ErrClosed)
	})
	parallel(t, m, "custom ErrorHandler", func(t *testing.T, v *env) {
		v.e.Add(http.MethodPut, "/items/:id", noContent, v.mw(Config{Locker: down(t), ErrorHandler: func(r Request, err error) error {
			return r.JSON(http.StatusTeapot, map[string]string{"status": "try later"})
		}}))
		v.expect(http.MethodPut, "/items/1", http.StatusTeapot)
	})
}

// lockerRefusesOptions runs the middleware with a TTL (30s) longer than the Locker's counter
// expiry (3s): every call is refused, which is the server's configuration and not the
// request's fault, so the default answer is 500; a middleware with the Locker's own TTL works.
func lockerRefusesOptions(t *testing.T, m Major) {
	v := newEnv(t, m, fencing.WithCounterExpiry(3*time.Second), fencing.WithTTL(3*time.Second))
	v.e.Add(http.MethodPut, "/items/:id", noContent, v.mw(Config{TTL: 30 * time.Second}))
	v.e.Add(http.MethodPut, "/short/:id", noContent, v.mw(Config{}))
	AssertBody(t, v.serve(http.MethodPut, "/items/1"), http.StatusInternalServerError, "expiry", "ttl", "fencing")
	v.wantErr(t, http.StatusInternalServerError, fencing.ErrInvalid)
	check(t, "keys in Redis", len(v.keys("*")), 0)
	v.expect(http.MethodPut, "/short/1", http.StatusNoContent) // with the Locker's TTL, 3s (a lease an acquisition's reply on a loaded machine beats)
}

func releases(t *testing.T, m Major) {
	boom := errors.New("boom")
	teapot := m.StatusError(http.StatusTeapot)
	for _, tc := range []struct {
		name    string
		handler Handler
		inner   bool // register Recover inside the fence rather than outside
		status  int
		err     func(err error) bool // of the error Echo's error handler saw; nil: not checked
	}{
		{"success", noContent, false, http.StatusNoContent, nil},
		// The handler's error itself, the very value.
		{"status error unchanged", func(Request) error { return teapot }, false, http.StatusTeapot,
			func(err error) bool { return err == teapot }}, //nolint:errorlint // the very value
		{"plain error", func(Request) error { return boom }, false, http.StatusInternalServerError,
			func(err error) bool { return err == boom }}, //nolint:errorlint // the very value
		{"panic", func(Request) error { panic("kaput") }, false, http.StatusInternalServerError,
			func(err error) bool { return err != nil && err.Error() == "kaput" }},
		{"panic with Recover inside", func(Request) error { panic("kaput") }, true, http.StatusInternalServerError, nil},
		{"panic with an error value", func(Request) error { panic(boom) }, false, http.StatusInternalServerError,
			func(err error) bool { return errors.Is(err, boom) }},
	} {
		parallel(t, m, tc.name, func(t *testing.T, v *env) {
			mws := []Middleware{v.mw(Config{})}
			if tc.inner {
				mws = append(mws, m.Recover())
			}
			v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
				check(t, "lock keys in the handler", len(v.lockKeys()), 1)
				return tc.handler(r)
			}, mws...)
			v.expect(http.MethodPut, "/items/1", tc.status)
			if err := v.lastErr(); tc.err != nil && !tc.err(err) {
				t.Errorf("got error %v, want the handler's error, or the recovered panic", err)
			}
			check(t, "lock keys after the request", len(v.lockKeys()), 0)
			_ = v.hold("/items/:id", "1", fencing.WithTTL(time.Second)) // the lock is free again
		})
	}
}

func releasesOnDisconnect(t *testing.T, m Major) {
	v := newEnv(t, m)
	entered := make(chan struct{})
	cause := make(chan error, 1)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		ctx := r.Request().Context()
		awaitCancel(ctx, entered, cause)
		return ctx.Err()
	}, v.mw(Config{}))

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, v.srv.URL+"/items/1", nil)
	clientErr := make(chan error, 1)
	go func() {
		resp, err := v.srv.Client().Do(req)
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

func concurrentRequestsNeverOverlap(t *testing.T, m Major) {
	const n = 32
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
	}{
		{"try once", 0},
		{"wait", 20 * time.Second},
	} {
		parallel(t, m, tc.name, func(t *testing.T, v *env) {
			var marks store.Memory // refuses a token below the highest it admitted
			var inside, maxInside, stale atomic.Int32
			var mu sync.Mutex
			var toks []int64 // the tokens admitted, in order (under mu, as count below)
			v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
				in := inside.Add(1)
				defer inside.Add(-1)
				for x := maxInside.Load(); in > x && !maxInside.CompareAndSwap(x, in); x = maxInside.Load() {
				}
				tok, _ := r.Token()
				// A read-modify-write with a Redis round trip in the middle widens the window.
				if err := v.r.Client.Ping(r.Request().Context()).Err(); err != nil {
					return err
				}
				if err := marks.Admit(r.Param("id"), tok); err != nil {
					stale.Add(1)
					return m.NewHTTPError(http.StatusConflict, err)
				}
				mu.Lock()
				toks = append(toks, tok)
				mu.Unlock()
				return noContent(r)
			}, v.mw(Config{MaxWait: tc.maxWait}))

			count := map[int]int{}
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range n {
				wg.Go(func() {
					<-start
					code := v.serve(http.MethodPut, "/items/1").Code
					mu.Lock()
					defer mu.Unlock()
					count[code]++
				})
			}
			close(start)
			wg.Wait()
			check(t, "stale writes", stale.Load(), 0)
			check(t, "most handlers inside at once", maxInside.Load(), 1)
			ok := count[http.StatusNoContent]
			if tc.maxWait == 0 && (ok < 1 || ok+count[http.StatusLocked] != n) {
				t.Errorf("got statuses %v, want at least one 204 and only 204 or 423", count)
			} else if tc.maxWait != 0 && ok != n {
				t.Errorf("got statuses %v, want %d × 204", count, n)
			}
			for i := 1; i < len(toks); i++ {
				if toks[i] <= toks[i-1] {
					t.Errorf("tokens not strictly increasing: %v", toks)
					break
				}
			}
			t.Logf("statuses %v", count)
			v.waitNoLocks()
		}, fencing.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	}
}

func differentResourcesRunInParallel(t *testing.T, m Major) {
	v := newEnv(t, m)
	entered := make(chan string, 2)
	both := make(chan struct{})
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		entered <- r.Param("id")
		select {
		case <-both:
			return noContent(r)
		case <-time.After(10 * time.Second):
			return m.StatusError(http.StatusRequestTimeout)
		}
	}, v.mw(Config{}))
	codes := make(chan int, 2)
	for _, id := range []string{"1", "2"} {
		go func() { codes <- v.serve(http.MethodPut, "/items/"+id).Code }()
	}
	recv(t, entered, "the first handler")
	recv(t, entered, "the second handler, while the first holds its lock")
	check(t, "lock keys", len(v.lockKeys()), 2)
	close(both)
	for range 2 {
		check(t, "status", recv(t, codes, "a response"), http.StatusNoContent)
	}
}

func nestedOnSameResourceIsReentrant(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Group("/items", v.mw(Config{ContextKey: "outer"})).Add(http.MethodPut, "/:id", func(r Request) error {
		check(t, "lock keys", len(v.lockKeys()), 1)
		if tok, _ := r.Token(); r.Get("outer") != tok || r.Get("inner") != tok {
			t.Errorf("got tokens %v (outer) and %v (inner), want both %d", r.Get("outer"), r.Get("inner"), tok)
		}
		return noContent(r)
	}, v.mw(Config{ContextKey: "inner", TokenHeader: "Fencing-Token"}))
	if rec := v.expect(http.MethodPut, "/items/1", http.StatusNoContent); rec.Header().Get("Fencing-Token") == "" {
		t.Errorf("got no Fencing-Token header from the inner middleware")
	}
}

func contextKeyKeptForLoggers(t *testing.T, m Major) {
	v := newEnv(t, m)
	_, key, _ := m.Constants()
	var logged any
	v.e.Use(m.Around(func(r Request, next func() error) error {
		err := next()
		logged = r.Get(key)
		return err
	}))
	v.e.Add(http.MethodPut, "/items/:id", func(Request) error { return m.StatusError(http.StatusTeapot) }, v.mw(Config{}))
	v.serve(http.MethodPut, "/items/1")
	if tok, ok := logged.(int64); !ok || tok < 1 {
		t.Errorf("got %v under %q after the handler, want the token", logged, key)
	}
}

// busyRetryAfter sends five requests in a row, each waiting MaxWait, to a resource that
// another replica holds and renews with a 5 s lease, while a request of this replica waits on
// it all along, so this replica's Locker already listens on the resource: each 423's
// Retry-After is the holder's remaining lease when it was answered, within a second of the
// lease read from Redis right after it, not a value of the wait's start nor 1 for a Locker
// that skipped its first attempt.
func busyRetryAfter(t *testing.T, m Major) {
	v := newEnv(t, m)
	other := fencing.New(v.r.Client, fencing.WithPrefix(v.r.Prefix)) // another replica's Locker
	t.Cleanup(func() { _ = other.Close() })
	const lease = 5 * time.Second
	v.e.Add(http.MethodPut, "/seats/:id", noContent, v.mw(Config{Namespace: "event", MaxWait: 300 * time.Millisecond}))
	v.e.Add(http.MethodPost, "/holds/:id", noContent, v.mw(Config{Namespace: "event", MaxWait: time.Minute}))

	holder, err := other.TryAcquire(t.Context(), echofence.Qualify("event", "7"), fencing.WithTTL(lease))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan int, 1)
	go func() { waiting <- v.serve(http.MethodPost, "/holds/7").Code }()
	eventually(t, 10*time.Second, "the long request waiting in the queue", func() bool {
		st, err := v.locker.Inspect(context.Background(), echofence.Qualify("event", "7"))
		return err == nil && len(st.Waiters) == 1
	})

	for i := range 5 {
		if err := holder.Extend(t.Context(), lease); err != nil { // the holder renews
			t.Fatal(err)
		}
		rec := v.serve(http.MethodPut, "/seats/7")
		left, err := v.r.Client.PTTL(context.Background(), v.lockKeys()[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if rec.Code != http.StatusLocked || err != nil {
			t.Fatalf("request %d: got %d with Retry-After %q, want 423 with a number", i+1, rec.Code, rec.Header().Get("Retry-After"))
		}
		// Retry-After rounds up the lease left when the answer was made; the lease read after
		// it can only be shorter.
		if d := time.Duration(ra)*time.Second - left; d < 0 || d > 2*time.Second {
			t.Errorf("request %d: Retry-After %d s with the holder's lease at %v, want it within a second of the lease",
				i+1, ra, left.Round(time.Millisecond))
		}
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	check(t, "the long request's status after the release", recv(t, waiting, "the long request"), http.StatusNoContent)
}
