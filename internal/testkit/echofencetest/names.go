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
)

func namespaces(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Add(http.MethodPut, "/a/:id", noContent, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/b/:id", noContent, v.mw(Config{}))
	v.e.Add(http.MethodPut, "/c/:id", noContent, v.mw(Config{Namespace: "shared"}))
	v.e.Add(http.MethodPut, "/d/:id", noContent, v.mw(Config{Namespace: "shared"}))
	v.e.Add(http.MethodPut, "/e/:id", noContent, v.mw(Config{Namespace: "/a/"}))
	v.hold("/a/:id", "1")
	v.hold("shared", "1")
	for target, want := range map[string]int{
		"/a/1": http.StatusLocked,
		"/b/1": http.StatusNoContent, // another route, another lock
		"/c/1": http.StatusLocked,    // shared namespace
		"/d/1": http.StatusLocked,    // shared namespace
		"/e/1": http.StatusNoContent, // Namespace "/a/" names "%2Fa/:1", not route /a/:id's lock on 1
	} {
		v.expect(http.MethodPut, target, want)
	}
}

// routeNames checks the lock names of routes in groups and of Any routes: the full route
// path, prefix included, and one lock for every method of an Any route.
func routeNames(t *testing.T, m Major) {
	v := newEnv(t, m)
	var path string // the route the handler saw, in the test's goroutine (serve)
	h := func(r Request) error { path = r.Path(); return noContent(r) }
	v.e.Group("/api").Add(http.MethodPut, "/orders/:id", h, v.mw(Config{}))
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
		for _, method := range tc.methods {
			if path = ""; v.expect(method, tc.target, http.StatusNoContent).Code == http.StatusNoContent && path != tc.route {
				t.Errorf("%s %s: the handler saw route %q, want %q", method, tc.target, path, tc.route)
			}
		}
		v.hold(tc.route, "7") // "<full route path> 7"
		for _, method := range tc.methods {
			v.expect(method, tc.target, http.StatusLocked)
		}
	}
}

// defaultConfig checks that DefaultConfig, Fence and the zero Config build the same lock
// names and defaults.
func defaultConfig(t *testing.T, m Major) {
	v := newEnv(t, m)
	mw, err := m.DefaultConfig(v.locker)
	if err != nil {
		t.Fatal(err)
	}
	v.e.Add(http.MethodPut, "/x/:id", noContent, mw)
	v.e.Add(http.MethodPut, "/y/:id", noContent, m.Fence(v.locker))
	v.e.Add(http.MethodPut, "/z/:id", noContent, v.mw(Config{}))
	for _, route := range []string{"/x/:id", "/y/:id", "/z/:id"} {
		v.hold(route, "1")
		v.expect(http.MethodPut, strings.Replace(route, ":id", "1", 1), http.StatusLocked)
	}
}

// groupUnknownPath pins the behaviour the package docs warn about: g.Use runs the
// middleware for the group's unknown paths too, which have no key.
func groupUnknownPath(t *testing.T, m Major) {
	v := newEnv(t, m)
	v.e.Group("/items", v.mw(Config{})).Add(http.MethodPut, "/:id", noContent)
	for target, want := range map[string]int{
		"/items/1":   http.StatusNoContent,
		"/items/":    http.StatusBadRequest, // the group's catch-all route "/items/*": no id
		"/items":     http.StatusBadRequest, // the group's catch-all route "/items": no id
		"/elsewhere": http.StatusNotFound,
		// With the catch-all routes, Echo's router gives /items/:id the id "1/unknown";
		// the lock is on the value the handler sees.
		"/items/1/unknown": http.StatusNoContent,
	} {
		v.expect(http.MethodPut, target, want)
	}
}

// resourceNameLimit sends a resource name of exactly fencing.MaxResourceLen bytes, which is
// locked, and one a byte longer, which is refused with a 400 that an ErrorHandler can
// change, before anything is written to Redis.
func resourceNameLimit(t *testing.T, m Major) {
	v := newEnv(t, m)
	_, _, maxKeyLen := m.Constants()
	key := strings.Repeat("k", maxKeyLen) // the longest key a request may give
	atLimit := strings.Repeat("n", fencing.MaxResourceLen-1-len(key))
	if got := len(echofence.Qualify(atLimit, key)); got != fencing.MaxResourceLen {
		t.Fatalf("the name at the limit has %d bytes, want %d", got, fencing.MaxResourceLen)
	}
	h := v.counted(noContent)
	lookup := "header:X-Id"
	v.e.Add(http.MethodPut, "/at", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit}))
	v.e.Add(http.MethodPut, "/over", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit + "n"}))
	v.e.Add(http.MethodPut, "/over-422", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit + "n",
		ErrorHandler: func(_ Request, err error) error {
			if errors.Is(err, fencing.ErrInvalid) {
				return m.NewHTTPError(http.StatusUnprocessableEntity, err)
			}
			return m.NewHTTPError(http.StatusServiceUnavailable, err)
		}}))

	if rec := v.serve(http.MethodPut, "/at", "X-Id", key); rec.Code != http.StatusNoContent || v.runs.Load() != 1 {
		t.Fatalf("name of %d bytes: got status %d and %d handler runs, want 204 and 1", fencing.MaxResourceLen, rec.Code, v.runs.Load())
	}
	// Its fence counter (and, for 10 s, the record of its release: docs/design.md).
	check(t, "fence counters after the request at the limit", len(v.keys("*:fence")), 1)
	before := v.keys("*")
	for _, tc := range []struct {
		target string
		status int
	}{
		{"/over", http.StatusBadRequest},
		{"/over-422", http.StatusUnprocessableEntity},
	} {
		AssertBody(t, v.serve(http.MethodPut, tc.target, "X-Id", key), tc.status, key, atLimit)
		v.wantErr(t, tc.status, fencing.ErrInvalid)
		if err := v.lastErr(); err != nil && !strings.Contains(err.Error(), "resource name of 4097 bytes exceeds 4096") {
			t.Errorf("%s: got error %q, want it to say the name's length and the limit", tc.target, err)
		}
	}
	check(t, "handler runs (only at the limit)", v.runs.Load(), 1)
	check(t, "keys after the names over the limit", len(v.keys("*")), len(before))
}

// untrustedNamesExpire sends 10,000 requests with distinct ids through the middleware, on a
// Locker with the configuration docs/echo.md recommends for names a client chooses
// (fencing.WithCounterExpiry), and shows that their fence counters are gone once the
// expiry has passed, while a Locker without it keeps one counter per name. On a real Redis
// the expiry is 3s, as is the lease (which an acquisition's reply on a loaded machine must
// beat: with 1s, 9 of 10,000 requests were refused 423 beside two busy loops), and the test
// waits for Redis to expire the counters.
// On miniredis the expiry is the recommended hour and FastForward moves time, with 2,000
// names: its Lua runs in Go, about 1.7ms a request under the race detector.
func untrustedNamesExpire(t *testing.T, m Major) {
	const (
		contrast   = 1_000 // names sent through a Locker without counter expiry
		recommend  = time.Hour
		realExpiry = 3 * time.Second // and the lease, on a real Redis
	)
	names, expiry, opts := 2_000, recommend, []fencing.Option{fencing.WithCounterExpiry(recommend)}
	if redistest.Real() {
		names, expiry = 10_000, realExpiry
		opts = []fencing.Option{fencing.WithCounterExpiry(expiry), fencing.WithTTL(realExpiry)}
	}
	parallel(t, m, "with counter expiry", func(t *testing.T, v *env) {
		sendDistinct(t, v, names)
		sent := time.Now()
		counters := v.keys("*:fence")
		if v.r.Mini != nil && len(counters) != names {
			t.Fatalf("got %d counters after %d names, want %d", len(counters), names, names)
		}
		for _, k := range counters[:min(len(counters), 100)] {
			// -2 (gone) is fine on a real Redis: the first counters may expire while the
			// last requests are sent. -1 would be a counter that never expires.
			if ttl := v.r.Client.PTTL(context.Background(), k).Val(); ttl == -time.Nanosecond || ttl > expiry {
				t.Fatalf("counter %s: TTL %v, want at most %v", k, ttl, expiry)
			}
		}
		if v.r.Mini != nil {
			v.r.Mini.FastForward(expiry - time.Second)
			if n := len(v.keys("*:fence")); n != names {
				t.Fatalf("a second before the expiry: got %d counters, want %d", n, names)
			}
			v.r.Mini.FastForward(time.Second)
		}
		eventually(t, time.Until(sent.Add(expiry+30*time.Second)), "every counter expired", func() bool {
			return len(v.keys("*")) == 0
		})
		t.Logf("%d names, %d counters right after; none %v after the last request", names, len(counters), time.Since(sent).Round(time.Millisecond))
	}, opts...)
	parallel(t, m, "without counter expiry", func(t *testing.T, v *env) {
		sendDistinct(t, v, contrast)
		v.r.Advance(realExpiry + time.Second) // past the real-Redis expiry above
		if v.r.Mini != nil {
			v.r.Mini.FastForward(recommend)
		}
		check(t, "counters left without expiry (one a name)", len(v.keys("*:fence")), contrast)
	})
}

// sendDistinct sends n PUT requests to /orders/<id> under Namespace "order", each with an id
// of its own, from 16 goroutines, and fails the test unless every one is answered 204.
func sendDistinct(t *testing.T, v *env, n int) {
	t.Helper()
	v.e.Add(http.MethodPut, "/orders/:id", noContent, v.mw(Config{Namespace: "order"}))
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				code := v.serve(http.MethodPut, "/orders/id-"+strconv.FormatInt(i, 10)).Code
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if codes[http.StatusNoContent] != n {
		t.Fatalf("got statuses %v for %d distinct names, want all 204", codes, n)
	}
}
