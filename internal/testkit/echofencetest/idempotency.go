package echofencetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

// idempotentRunsOnceAndReplays sends a request with a key, then the same again: the handler
// runs once, with a token; the first request costs the round trips of the Fence middleware
// (the acquire, then the commit in the release's round trip); the retry gets the stored
// response byte for byte, marked, in one round trip without a lock or a token.
func idempotentRunsOnceAndReplays(t *testing.T, m Major) {
	v := newEnv(t, m)
	var trips redistest.Trips
	var taken Acquisitions
	c := v.r.NewClient(t)
	c.AddHook(&trips)
	l := fencing.New(c, fencing.WithPrefix(v.r.Prefix), fencing.WithHooks(taken.Hooks()))
	t.Cleanup(func() { _ = l.Close() })
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{Locker: l}))
	// Another key first: the connection is open and Redis knows the scripts before the count.
	if r := v.send(http.MethodPost, "/payments/0", "warm-up", ""); r.status != http.StatusCreated {
		t.Fatalf("warm-up: got %d %q", r.status, r.body)
	}

	before := trips.Load()
	first := v.send(http.MethodPost, "/payments/7", "k-1", `{"amount":5}`)
	check(t, "first request: round trips (acquire; commit with the release)", trips.Load()-before, 2)
	p := first.payment(t)
	if first.status != http.StatusCreated || p.Run != 2 || p.Token < 1 || p.Body != `{"amount":5}` || first.replayed() {
		t.Fatalf("first request: got %d %q (replayed %v), want 201 from run 2 with a token and the body", first.status, first.body, first.replayed())
	}
	name := echofence.IdempotencyName("", "/payments/:id", "k-1")
	recs := v.keys("{" + name + "}:idem")
	if len(recs) != 1 {
		t.Fatalf("got records %q, want 1", recs)
	}
	if ttl := v.r.Client.PTTL(t.Context(), recs[0]).Val(); ttl <= 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("record TTL %v, want the default 24h", ttl)
	}
	fence := strings.TrimSuffix(recs[0], "idem") + "fence"
	issued := v.r.Client.Get(t.Context(), fence).Val()

	for _, key := range []string{"k-1", `"k-1"`} { // the same key, bare and as an sf-string
		before, acquired := trips.Load(), taken.Load()
		again := v.send(http.MethodPost, "/payments/7", key, `{"amount":5}`)
		sameResponse(t, "retry with "+key, first, again)
		if again.header.Get("X-Run") != "" {
			t.Errorf("retry: X-Run %q replayed, want only ReplayHeaders", again.header.Get("X-Run"))
		}
		check(t, "retry with "+key+": round trips", trips.Load()-before, 1)
		check(t, "retry with "+key+": locks taken", taken.Load()-acquired, 0)
	}
	check(t, "handler runs (the warm-up's key, and k-1's once)", v.runs.Load(), 2)
	check(t, "fence counter after the retries (no token issued)", v.r.Client.Get(t.Context(), fence).Val(), issued)
	check(t, "lock keys left", len(v.lockKeys()), 0)
}

// idempotentKeys checks the key: optional (the request runs, nothing stored) or required
// (400), one header of 1 to 255 bytes without control characters, bare or an sf-string.
func idempotentKeys(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/optional/:id", v.pay, v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/required/:id", v.pay, v.imw(IdemConfig{Required: true}))
	v.e.Add(http.MethodPost, "/custom/:id", v.pay, v.imw(IdemConfig{Header: "x-request-key"}))

	for range 2 {
		if r := v.send(http.MethodPost, "/optional/1", "", "b"); r.status != http.StatusCreated || r.payment(t).Body != "b" {
			t.Fatalf("no key, optional: got %d %q, want 201 with the body", r.status, r.body)
		}
	}
	if n, recs := v.runs.Load(), v.records(); n != 2 || len(recs) != 0 || len(v.keys("*")) != 0 {
		t.Fatalf("no key, optional: %d runs and records %q, want 2 runs and nothing in Redis", n, recs)
	}

	long := strings.Repeat("k", echofence.MaxIdempotencyKeyLen)
	for _, tc := range []struct {
		name, path string
		header     []string
		detail     string
	}{
		{"no key, required", "/required/1", nil, "needs an Idempotency-Key"},
		{"empty", "/optional/1", []string{"Idempotency-Key", ""}, "1 to 255 bytes"},
		{"256 bytes", "/optional/1", []string{"Idempotency-Key", long + "k"}, "1 to 255 bytes"},
		{"256 bytes quoted", "/optional/1", []string{"Idempotency-Key", `"` + long + `k"`}, "1 to 255 bytes"},
		{"two fields", "/optional/1", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, "one Idempotency-Key"},
		{"unterminated string", "/optional/1", []string{"Idempotency-Key", `"abc`}, "not a valid string"},
		{"bad escape", "/optional/1", []string{"Idempotency-Key", `"a\qb"`}, "not a valid string"},
		{"non-ASCII in a string", "/optional/1", []string{"Idempotency-Key", "\"\xc3\xa9\""}, "not a valid string"},
		{"custom header empty", "/custom/1", []string{"X-Request-Key", ""}, "X-Request-Key header must"},
	} {
		wantProblem(t, tc.name, v.send(http.MethodPost, tc.path, "", "b", tc.header...), http.StatusBadRequest, tc.detail, v.secrets(long, "abc")...)
		v.wantErr(t, http.StatusBadRequest, fencing.ErrInvalid)
	}
	// Control characters cannot cross net/http's client: straight into Echo.
	for _, key := range []string{"a\x00b", "a\x1fb", "a\tb", "a\x7fb"} {
		v.expect(http.MethodPost, "/optional/1", http.StatusBadRequest, "Idempotency-Key", key)
	}
	if n, recs := v.runs.Load(), v.records(); n != 2 || len(recs) != 0 {
		t.Fatalf("after the refused keys: %d runs and records %q, want 2 runs and no record", n, recs)
	}

	// The longest key, bare and quoted (257 bytes with its quotes), and the custom header.
	for _, tc := range []struct{ path, header, key string }{
		{"/required/1", "Idempotency-Key", long},
		{"/required/2", "Idempotency-Key", `"` + long[1:] + `\\"`},
		{"/custom/1", "X-Request-Key", "c"},
	} {
		first := v.send(http.MethodPost, tc.path, "", "b", tc.header, tc.key)
		again := v.send(http.MethodPost, tc.path, "", "b", tc.header, tc.key)
		if first.status != http.StatusCreated {
			t.Fatalf("%s %.20q: got %d %q, want 201", tc.path, tc.key, first.status, first.body)
		}
		sameResponse(t, tc.path+" again", first, again)
	}
	// Idempotency-Key means nothing to the route with another header.
	for range 2 {
		v.send(http.MethodPost, "/custom/2", "k", "b").fresh(t, "custom route with Idempotency-Key only", http.StatusCreated)
	}
	check(t, "handler runs", v.runs.Load(), 7)
}

// idempotentKeyReused sends a key with another request: 422, whatever differs (the body, a
// path value), while the first request's result stays replayable; another route has its
// own keys; a Fingerprint decides what counts.
func idempotentKeyReused(t *testing.T, m Major) {
	v := newEnv(t, m)
	keyReused, _ := m.IdempotencyErrors()
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/refunds/:id", v.pay, v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/lenient/:id", v.pay, v.imw(IdemConfig{Fingerprint: func(r Request) (string, error) {
		return r.Param("id"), nil // the body does not count
	}}))
	v.e.Add(http.MethodPost, "/query/:id", v.pay, v.imw(IdemConfig{Fingerprint: func(r Request) (string, error) {
		fp, err := r.DefaultFingerprint()
		return fp + " " + r.Request().URL.RawQuery, err
	}}))

	first := v.send(http.MethodPost, "/payments/1", "k", "a")
	for _, tc := range []struct{ path, body string }{{"/payments/1", "b"}, {"/payments/2", "a"}, {"/payments/1", ""}} {
		wantProblem(t, tc.path+" "+tc.body+" with the key of another request", v.send(http.MethodPost, tc.path, "k", tc.body),
			http.StatusUnprocessableEntity, "another request", v.secrets(`"k"`)...)
		v.wantErr(t, http.StatusUnprocessableEntity, keyReused)
	}
	sameResponse(t, "the first request again", first, v.send(http.MethodPost, "/payments/1", "k", "a"))
	v.send(http.MethodPost, "/refunds/1", "k", "a").fresh(t, "another route, same key", http.StatusCreated)
	lenient := v.send(http.MethodPost, "/lenient/1", "k", "a")
	sameResponse(t, "lenient fingerprint, another body", lenient, v.send(http.MethodPost, "/lenient/1", "k", "b"))
	q := v.send(http.MethodPost, "/query/1?x=1", "k", "a")
	sameResponse(t, "query fingerprint, same query", q, v.send(http.MethodPost, "/query/1?x=1", "k", "a"))
	if r := v.send(http.MethodPost, "/query/1?x=2", "k", "a"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("query fingerprint, another query: got %d, want 422", r.status)
	}
	check(t, "handler runs", v.runs.Load(), 4)
}

// idempotentBodies checks MaxBody: a request body over it is 413 before anything runs, also
// when its length is not announced; a response body over it reaches the client whole and is
// not stored.
func idempotentBodies(t *testing.T, m Major) {
	v := newEnv(t, m)
	_, tooLarge := m.IdempotencyErrors()
	const limit = 64
	v.e.Add(http.MethodPost, "/payments/:id", v.counted(func(r Request) error {
		return r.String(http.StatusCreated, "paid") // within the limit, unlike pay's answer
	}), v.imw(IdemConfig{MaxBody: limit}))
	report := strings.Repeat("r", limit+1)
	v.e.Add(http.MethodPost, "/reports/:id", v.counted(func(r Request) error { return r.String(http.StatusOK, report) }),
		v.imw(IdemConfig{MaxBody: limit}))

	if r := v.send(http.MethodPost, "/payments/1", "at", strings.Repeat("b", limit)); r.status != http.StatusCreated {
		t.Fatalf("body of MaxBody bytes: got %d %q, want 201", r.status, r.body)
	}
	over := strings.Repeat("b", limit+1)
	chunked := func() reply {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, v.srv.URL+"/payments/1", strings.NewReader(over))
		req.ContentLength = -1 // sent chunked
		req.Header.Set("Idempotency-Key", "chunked")
		resp, err := v.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return reply{status: resp.StatusCode, header: resp.Header}
	}
	for what, r := range map[string]reply{"announced": v.send(http.MethodPost, "/payments/1", "over", over), "chunked": chunked()} {
		wantProblem(t, "body over MaxBody, "+what, r, http.StatusRequestEntityTooLarge, "")
		v.wantErr(t, http.StatusRequestEntityTooLarge, tooLarge)
	}
	check(t, "handler runs", v.runs.Load(), 1)

	for i := range 2 {
		r := v.send(http.MethodPost, "/reports/1", "big", "")
		if r.status != http.StatusOK || r.body != report || r.replayed() {
			t.Errorf("response over MaxBody, request %d: got %d with %d bytes (replayed %v), want 200 with %d, not replayed",
				i, r.status, len(r.body), r.replayed(), len(report))
		}
	}
	check(t, "handler runs (a response over MaxBody is not stored)", v.runs.Load(), 3)
	check(t, "records (the first payment's)", len(v.records()), 1)
}

// idempotentNotKept checks which results are stored: a 5xx, a panic and what Keep refuses
// are not (a retry runs again, and nothing is left in Redis but counters); a handler's
// error below 500, answered by Echo's error handler, is, and is replayed as Echo wrote it.
func idempotentNotKept(t *testing.T, m Major) {
	v := newEnv(t, m)
	teapot := m.StatusError(http.StatusTeapot)
	v.e.Add(http.MethodPost, "/fail/:id", v.counted(func(Request) error { return errors.New("boom") }), v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/panic/:id", v.counted(func(Request) error { panic("kaput") }), v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/teapot/:id", v.counted(func(Request) error { return teapot }), v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/only-2xx/:id", v.counted(func(Request) error { return teapot }),
		v.imw(IdemConfig{Keep: func(status int) bool { return status < 300 }}))
	v.e.Add(http.MethodPost, "/accepted/:id", v.counted(func(r Request) error { return r.NoContent(http.StatusAccepted) }),
		v.imw(IdemConfig{Keep: func(status int) bool { return status == http.StatusAccepted }}))

	for _, tc := range []struct {
		path   string
		status int
		kept   bool
	}{
		{"/fail/1", http.StatusInternalServerError, false},
		{"/panic/1", http.StatusInternalServerError, false},
		{"/teapot/1", http.StatusTeapot, true},
		{"/only-2xx/1", http.StatusTeapot, false},
		{"/accepted/1", http.StatusAccepted, true},
	} {
		before := v.runs.Load()
		first := v.send(http.MethodPost, tc.path, "k", "")
		again := v.send(http.MethodPost, tc.path, "k", "")
		runs := v.runs.Load() - before
		switch {
		case first.status != tc.status:
			t.Errorf("%s: got %d %q, want %d", tc.path, first.status, first.body, tc.status)
		case tc.kept:
			sameResponse(t, tc.path+" again", first, again)
			if runs != 1 {
				t.Errorf("%s: handler ran %d times, want 1", tc.path, runs)
			}
		case runs != 2 || again.replayed() || again.status != tc.status:
			t.Errorf("%s, not kept: retry got %d (replayed %v) after %d runs, want %d from a second run", tc.path, again.status, again.replayed(), runs, tc.status)
		}
	}
	check(t, "records (/teapot's and /accepted's)", len(v.records()), 2)
	check(t, "lock keys left", len(v.lockKeys()), 0)
}

// idempotentConcurrentRetries sends many requests with one key at once: with MaxWait long
// enough, the handler runs once and every client gets the same response; with MaxWait 0,
// those that arrive while it runs get 409 with Retry-After, and those after it the replay.
func idempotentConcurrentRetries(t *testing.T, m Major) {
	const key = "pay-once"
	// queued returns the length of the key's lock queue.
	queued := func(v *env) int64 {
		name := echofence.IdempotencyName("", "/payments/:id", key)
		return v.r.Client.LLen(context.Background(), v.r.Prefix+"{"+name+"}:queue").Val()
	}
	parallel(t, m, "MaxWait", func(t *testing.T, v *env) {
		const n = 100
		v.e.Add(http.MethodPost, "/payments/:id", func(r Request) error {
			// Every other request waits in the key's queue before this one ends.
			eventually(t, 2*time.Minute, "the other requests waiting", func() bool { return queued(v) == n-1 })
			return v.pay(r)
		}, v.imw(IdemConfig{MaxWait: 2 * time.Minute}))
		replies := sendMany(n, func(int) reply { return v.send(http.MethodPost, "/payments/1", key, "a") })
		replayed := 0
		for _, r := range replies {
			if r.status != http.StatusCreated || r.body != replies[0].body {
				t.Fatalf("got %d %q, want every reply 201 %q", r.status, r.body, replies[0].body)
			}
			if r.replayed() {
				replayed++
			}
		}
		if runs := v.runs.Load(); runs != 1 || replayed != n-1 {
			t.Errorf("handler ran %d times, %d replies replayed; want 1 and %d", runs, replayed, n-1)
		}
		v.waitNoLocks()
	}, fencing.WithRetryBackoff(time.Millisecond, 20*time.Millisecond))
	parallel(t, m, "no wait", func(t *testing.T, v *env) {
		const n = 20
		entered, release := make(chan struct{}), make(chan struct{})
		v.e.Add(http.MethodPost, "/payments/:id", func(r Request) error {
			close(entered)
			<-release
			return v.pay(r)
		}, v.imw(IdemConfig{}))
		done := make(chan reply, 1)
		go func() { done <- v.send(http.MethodPost, "/payments/1", key, "a") }()
		recv(t, entered, "the first request's handler")
		for _, r := range sendMany(n, func(int) reply { return v.send(http.MethodPost, "/payments/1", key, "a") }) {
			if r.header.Get("Retry-After") != "1" {
				t.Errorf("while the first runs: got Retry-After %q, want 1", r.header.Get("Retry-After"))
			}
			wantProblem(t, "while the first runs", r, http.StatusConflict, "being processed")
		}
		v.wantErr(t, http.StatusConflict, fencing.ErrNotAcquired)
		close(release)
		first := recv(t, done, "the first request")
		if first.status != http.StatusCreated {
			t.Fatalf("first request: got %d %q, want 201", first.status, first.body)
		}
		for _, r := range sendMany(n, func(int) reply { return v.send(http.MethodPost, "/payments/1", key, "a") }) {
			sameResponse(t, "after the first", first, r)
		}
		check(t, "handler runs", v.runs.Load(), 1)
	})
}

// idempotentRetention stores a result for a second: once it has expired, the key runs again.
func idempotentRetention(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{Retention: time.Second}))
	first := v.send(http.MethodPost, "/payments/1", "k", "a")
	recs := v.records()
	if len(recs) != 1 {
		t.Fatalf("got records %q, want 1", recs)
	}
	if ttl := v.r.Client.PTTL(t.Context(), recs[0]).Val(); ttl <= 0 || ttl > time.Second {
		t.Fatalf("record TTL %v, want at most 1s", ttl)
	}
	sameResponse(t, "retry within the Retention", first, v.send(http.MethodPost, "/payments/1", "k", "a"))
	if v.r.Mini != nil {
		v.r.Mini.FastForward(time.Second)
	}
	eventually(t, 10*time.Second, "the record's expiry", func() bool { return len(v.records()) == 0 })
	later := v.send(http.MethodPost, "/payments/1", "k", "a")
	if p := later.payment(t); later.status != http.StatusCreated || later.replayed() || p.Run != 2 || p.Token <= first.payment(t).Token {
		t.Errorf("after the Retention: got %d %q (replayed %v), want a second run with a higher token", later.status, later.body, later.replayed())
	}
}

// idempotentScope gives each client its own key space: the same key from two clients runs
// twice; Scope's errors answer the request (an HTTP status error as it is).
func idempotentScope(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{Scope: func(r Request) (string, error) {
		switch id := r.Request().Header.Get("X-Client"); id {
		case "":
			return "", m.StatusError(http.StatusUnauthorized)
		case "ghost":
			return "", errors.New("no such client")
		default:
			return id, nil
		}
	}}))
	a := v.send(http.MethodPost, "/payments/1", "k", "x", "X-Client", "a b") // a space in a scope
	b := v.send(http.MethodPost, "/payments/1", "k", "x", "X-Client", "a")
	if a.payment(t).Run != 1 || b.payment(t).Run != 2 || b.replayed() {
		t.Fatalf("two clients, one key: got runs %d and %d, want 1 and 2", a.payment(t).Run, b.payment(t).Run)
	}
	sameResponse(t, "client a again", a, v.send(http.MethodPost, "/payments/1", "k", "x", "X-Client", "a b"))
	if r := v.send(http.MethodPost, "/payments/1", "k", "x"); r.status != http.StatusUnauthorized {
		t.Errorf("Scope's status error: got %d, want 401", r.status)
	}
	if r := v.send(http.MethodPost, "/payments/1", "k", "x", "X-Client", "ghost"); r.status != http.StatusBadRequest {
		t.Errorf("Scope's error: got %d, want 400", r.status)
	} else {
		AssertNoSecrets(t, r.body, "no such client")
	}
	check(t, "handler runs", v.runs.Load(), 2)
}

// idempotentLockLost loses the key's lock while the handler runs: its context is cancelled,
// its client gets its answer, and nothing is stored, so a retry runs again.
func idempotentLockLost(t *testing.T, m Major) {
	// Renewed every second: a lease a slow reply on a loaded machine cannot outlast (a 300ms one
	// could, and the first request got 409 without running the handler).
	v := newEnv(t, m, fencing.WithTTL(3*time.Second))
	causes := make(chan error, 1)
	v.e.Add(http.MethodPost, "/payments/:id", func(r Request) error {
		if v.runs.Load() == 0 {
			entered := make(chan struct{})
			go func() { <-entered; _ = v.r.Client.Del(context.Background(), v.lockKeys()...) }()
			awaitCancel(r.Request().Context(), entered, causes)
		}
		return v.pay(r)
	}, v.imw(IdemConfig{}))
	first := v.send(http.MethodPost, "/payments/1", "k", "a")
	if cause := recv(t, causes, "the handler's context"); !errors.Is(cause, fencing.ErrNotHeld) {
		t.Fatalf("handler's context: got cause %v, want fencing.ErrNotHeld", cause)
	}
	first.fresh(t, "lost lock", http.StatusCreated)
	check(t, "lost lock: records", len(v.records()), 0)
	if again := v.send(http.MethodPost, "/payments/1", "k", "a"); again.replayed() || again.payment(t).Run != 2 {
		t.Errorf("retry after a lost lock: got %q (replayed %v), want a second run", again.body, again.replayed())
	}
}

// idempotentChainWithFence runs the pattern docs/echo.md shows: the idempotency middleware
// outside, the Fence middleware on the account inside. A busy account answers 423, which is
// not stored; the retry runs under both locks, with the account's token, and is stored.
func idempotentChainWithFence(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/accounts/:id/payouts", v.pay,
		v.imw(IdemConfig{}), v.mw(Config{Namespace: "account", DefaultHandlers: true}))
	lock := v.hold("account", "a1")
	busy := v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100")
	if assertMessage(t, busy, http.StatusLocked, "account:a1 is busy"); busy.header.Get("Retry-After") == "" {
		t.Errorf("busy account: got no Retry-After, want one")
	}
	if recs := v.records(); len(recs) != 0 {
		t.Fatalf("busy account: got records %q, want none", recs)
	}
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100")
	if p := first.payment(t); first.status != http.StatusCreated || p.Token != lock.Token()+1 {
		t.Fatalf("after the account's release: got %d %q, want 201 with the account's next token %d", first.status, first.body, lock.Token()+1)
	}
	sameResponse(t, "retry", first, v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100"))
	check(t, "handler runs", v.runs.Load(), 1)
}

// idempotentOddKeys sends keys with every printable ASCII and every non-ASCII byte (braces,
// quotes, spaces, '%', invalid UTF-8): each is a key of its own, stored and replayed.
func idempotentOddKeys(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{}))
	var keys []string
	for b := 0x20; b <= 0xff; b++ {
		if b != 0x7f {
			keys = append(keys, "k"+string([]byte{byte(b)})+"k")
		}
	}
	keys = append(keys, "{", "}", "{x}", "}{", "%20", "a b", "\xff\xfe", `\"`, "ünï", strings.Repeat("{", 255))
	// Sixteen requests at a time: the keys are the point here, not their number at once (233 at
	// once kept releases in a loaded machine's miniredis past Do's release timeout).
	first := sendAtMost(16, len(keys), func(i int) reply { return v.send(http.MethodPost, "/payments/1", keys[i], "a") })
	runs := map[int32]string{}
	for i, key := range keys {
		if first[i].status != http.StatusCreated || first[i].replayed() {
			t.Fatalf("key %q: got %d %q, want 201", key, first[i].status, first[i].body)
		}
		run := first[i].payment(t).Run
		if other, dup := runs[run]; dup {
			t.Fatalf("keys %q and %q got the same run", other, key)
		}
		runs[run] = key
	}
	again := sendAtMost(16, len(keys), func(i int) reply { return v.send(http.MethodPost, "/payments/1", keys[i], "a") })
	for i, key := range keys {
		sameResponse(t, "key "+strconv.Quote(key), first[i], again[i])
	}
	if n, recs := v.runs.Load(), v.records(); int(n) != len(keys) || len(recs) != len(keys) {
		t.Errorf("%d keys: %d runs and %d records, want one each", len(keys), n, len(recs))
	}
}

// idempotentSkipper checks the default Skipper: a GET runs every time and stores nothing,
// unless no method is skipped; so does a QUERY (RFC 10008) where the major knows it as safe
// (Echo v5), while Echo v4, which does not, stores and replays it as any unsafe method.
func idempotentSkipper(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodGet, "/default/:id", v.pay, v.imw(IdemConfig{}))
	v.e.Add(http.MethodGet, "/all/:id", v.pay, v.imw(IdemConfig{SkipNone: true}))
	for range 2 {
		if r := v.send(http.MethodGet, "/default/1", "k", ""); r.replayed() {
			t.Error("GET under the default Skipper: replayed, want it to run")
		}
	}
	first := v.send(http.MethodGet, "/all/1", "k", "")
	sameResponse(t, "GET with no method skipped", first, v.send(http.MethodGet, "/all/1", "k", ""))
	check(t, "handler runs", v.runs.Load(), 3)
	if len(v.records()) != 1 {
		t.Fatalf("got records %q, want the one of /all", v.records())
	}

	v.e.Add(echofence.MethodQuery, "/search/:id", v.pay, v.imw(IdemConfig{}))
	query := v.send(echofence.MethodQuery, "/search/1", "q", `{"q":"x"}`)
	again := v.send(echofence.MethodQuery, "/search/1", "q", `{"q":"x"}`)
	if query.status != http.StatusCreated || query.payment(t).Body != `{"q":"x"}` {
		t.Fatalf("QUERY: got %d %q, want 201 with the body", query.status, query.body)
	}
	if m.Query() {
		if again.replayed() || again.payment(t).Run != 5 || len(v.records()) != 1 {
			t.Errorf("QUERY again: got %q (replayed %v) and records %q, want a second run and nothing stored",
				again.body, again.replayed(), v.records())
		}
	} else {
		sameResponse(t, "QUERY in a major that does not know it", query, again)
	}
}

// idempotentLockTTL checks the lease of the key's lock while the handler runs: by default
// 10s on a Locker of 30s, the Locker's own when that is shorter, and LockTTL when set.
func idempotentLockTTL(t *testing.T, m Major) {
	v := newEnv(t, m) // the Locker's TTL: fencing.DefaultTTL, 30s
	short := fencing.New(v.r.Client, fencing.WithPrefix(v.r.Prefix), fencing.WithTTL(3*time.Second))
	t.Cleanup(func() { _ = short.Close() })
	leases := make(chan time.Duration, 1)
	h := func(r Request) error {
		name := echofence.IdempotencyName("", r.Path(), r.Request().Header.Get("Idempotency-Key"))
		keys := v.keys("{" + name + "}:lock")
		if len(keys) != 1 {
			leases <- 0
			return r.NoContent(http.StatusInternalServerError)
		}
		leases <- v.r.Client.PTTL(r.Request().Context(), keys[0]).Val()
		return r.NoContent(http.StatusNoContent)
	}
	v.e.Add(http.MethodPost, "/default/:id", h, v.imw(IdemConfig{}))
	v.e.Add(http.MethodPost, "/short/:id", h, v.imw(IdemConfig{Locker: short}))
	v.e.Add(http.MethodPost, "/set/:id", h, v.imw(IdemConfig{LockTTL: 2 * time.Second}))
	v.e.Add(http.MethodPost, "/long/:id", h, v.imw(IdemConfig{Locker: short, LockTTL: time.Minute}))
	for _, tc := range []struct {
		path string
		want time.Duration
	}{
		{"/default/1", echofence.DefaultLockTTL},
		{"/short/1", 3 * time.Second},
		{"/set/1", 2 * time.Second},
		{"/long/1", time.Minute},
	} {
		if r := v.send(http.MethodPost, tc.path, "k", ""); r.status != http.StatusNoContent {
			t.Errorf("POST %s: got %d %q, want 204", tc.path, r.status, r.body)
		}
		// A lease just taken: at most the setting, and not less than half of it.
		if got := recv(t, leases, "the handler of "+tc.path); got > tc.want || got < tc.want/2 {
			t.Errorf("POST %s: the key's lock had %v left, want %v or a little less", tc.path, got, tc.want)
		}
	}
	if echofence.DefaultLockTTL != 10*time.Second {
		t.Errorf("DefaultLockTTL is %v, the documented default is 10s", echofence.DefaultLockTTL)
	}
}

// idempotentLostLockNotKept runs the idempotency middleware in front of the Fence
// middleware, with a handler whose write is refused as stale the first time: the Fence
// answers 503 with Retry-After, a 5xx, which is not kept, so the retry with the same key runs
// again and its 201 is stored.
func idempotentLostLockNotKept(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/accounts/:id/payouts", func(r Request) error {
		if v.runs.Load() == 0 {
			v.runs.Add(1)
			return fmt.Errorf("debit: %w", &store.StaleTokenError{Resource: "account:a1", Token: 1, Mark: 2})
		}
		return v.pay(r)
	}, v.imw(IdemConfig{}), v.mw(Config{Namespace: "account"}))
	lost := v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100")
	assertMessage(t, lost, http.StatusServiceUnavailable, "the lock on account:a1 was lost while the request ran", v.secrets("stale", "mark")...)
	if lost.header.Get("Retry-After") != "1" || lost.replayed() {
		t.Errorf("stale write: got Retry-After %q (replayed %v), want 1, not replayed", lost.header.Get("Retry-After"), lost.replayed())
	}
	v.wantErr(t, http.StatusServiceUnavailable, store.ErrStaleToken)
	if recs := v.records(); len(recs) != 0 {
		t.Fatalf("stale write: got records %q, want none (a 5xx is not kept)", recs)
	}
	again := v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100")
	if again.status != http.StatusCreated || again.replayed() || again.payment(t).Run != 2 {
		t.Fatalf("retry: got %d %q (replayed %v), want a second run's 201", again.status, again.body, again.replayed())
	}
	sameResponse(t, "second retry", again, v.send(http.MethodPost, "/accounts/a1/payouts", "k", "100"))
}

// idempotentLockerRefuses uses a Locker built with WithReplicas on a server without replicas:
// every acquisition fails with fencing.ErrNotReplicated, so every request is answered 503,
// without running, and leaves no lock and no record (its token is used up).
func idempotentLockerRefuses(t *testing.T, m Major) {
	v := newEnv(t, m)
	l := fencing.New(v.r.Client, fencing.WithPrefix(v.r.Prefix), fencing.WithReplicas(1, 200*time.Millisecond))
	t.Cleanup(func() { _ = l.Close() })
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{Locker: l}))
	wantProblem(t, "refused", v.send(http.MethodPost, "/payments/1", "k", "a"), http.StatusServiceUnavailable, "", v.secrets("replica", "guard")...)
	v.wantErr(t, 0, fencing.ErrNotReplicated)
	if n := v.runs.Load(); n != 0 || len(v.lockKeys()) != 0 || len(v.records()) != 0 {
		t.Errorf("handler ran %d times, locks %q and records %q are left, want none", n, v.lockKeys(), v.records())
	}
}

// wantProblem checks that r is an RFC 9457 problem document of status, whose detail says
// detail unless it is "", and that its body holds none of the secrets.
func wantProblem(t testing.TB, what string, r reply, status int, detail string, secrets ...string) {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != echofence.ContentTypeProblem {
		t.Errorf("%s: got %d %s %q, want a %d problem", what, r.status, r.header.Get("Content-Type"), r.body, status)
		return
	}
	if detail != "" && !strings.Contains(r.problem(t), detail) {
		t.Errorf("%s: got body %q, want a detail that says %q", what, r.body, detail)
	}
	AssertNoSecrets(t, r.body, secrets...)
}
