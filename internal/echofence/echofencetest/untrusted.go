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
	"github.com/fencekit/fencekit/internal/redistest"
)

// resourceNameLimit sends a resource name of exactly fencing.MaxResourceLen bytes, which is
// locked, and one a byte longer, which is refused with a 400 that an ErrorHandler can
// change, before anything is written to Redis.
func resourceNameLimit(t *testing.T, d Driver) {
	v := newEnv(t, d)
	key := strings.Repeat("k", d.MaxKeyLen()) // the longest key a request may give
	atLimit := strings.Repeat("n", fencing.MaxResourceLen-1-len(key))
	if got := len(echofence.Qualify(atLimit, key)); got != fencing.MaxResourceLen {
		t.Fatalf("the name at the limit has %d bytes, want %d", got, fencing.MaxResourceLen)
	}
	var ran atomic.Int32
	h := func(r Request) error { ran.Add(1); return r.NoContent(http.StatusNoContent) }
	lookup := "header:X-Id"
	v.e.Add(http.MethodPut, "/at", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit}))
	v.e.Add(http.MethodPut, "/over", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit + "n"}))
	v.e.Add(http.MethodPut, "/over-422", h, v.mw(Config{KeyLookup: lookup, Namespace: atLimit + "n",
		ErrorHandler: func(_ Request, err error) error {
			if errors.Is(err, fencing.ErrInvalid) {
				return d.NewHTTPError(http.StatusUnprocessableEntity, err)
			}
			return d.NewHTTPError(http.StatusServiceUnavailable, err)
		}}))

	if rec := v.serve(http.MethodPut, "/at", "X-Id", key); rec.Code != http.StatusNoContent || ran.Load() != 1 {
		t.Fatalf("name of %d bytes: got status %d and %d handler runs, want 204 and 1", fencing.MaxResourceLen, rec.Code, ran.Load())
	}
	// Its fence counter (and, for 10 s, the record of its release: docs/design.md).
	if fences := v.keys("*:fence"); len(fences) != 1 {
		t.Errorf("after the request at the limit: got %d fence counters, want 1", len(fences))
	}
	before := v.keys("*")
	for _, tc := range []struct {
		target string
		status int
	}{
		{"/over", http.StatusBadRequest},
		{"/over-422", http.StatusUnprocessableEntity},
	} {
		rec := v.serve(http.MethodPut, tc.target, "X-Id", key)
		AssertBody(t, rec, tc.status, key, atLimit)
		err := v.lastErr()
		if !v.isHTTPError(err, tc.status) || !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("%s: got error %v, want the middleware's %d matching fencing.ErrInvalid", tc.target, err, tc.status)
		}
		if err != nil && !strings.Contains(err.Error(), "resource name of 4097 bytes exceeds 4096") {
			t.Errorf("%s: got error %q, want it to say the name's length and the limit", tc.target, err)
		}
	}
	if ran.Load() != 1 {
		t.Errorf("the handler ran %d times, want once (only at the limit)", ran.Load())
	}
	if after := v.keys("*"); len(after) != len(before) {
		t.Errorf("names over the limit wrote to Redis: %d keys before, %d after", len(before), len(after))
	}
}

// untrustedNamesExpire sends 10,000 requests with distinct ids through the middleware, on a
// Locker with the configuration docs/echo.md recommends for names a client chooses
// (fencing.WithCounterExpiry), and shows that their fence counters are gone once the
// expiry has passed, while a Locker without it keeps one counter per name. On a real Redis
// the expiry is 2s (and the lease 1s) and the test waits for Redis to expire the counters.
// On miniredis the expiry is the recommended hour and FastForward moves time, with 2,000
// names: its Lua runs in Go, about 1.7ms a request under the race detector.
func untrustedNamesExpire(t *testing.T, d Driver) {
	const (
		contrast  = 1_000 // names sent through a Locker without counter expiry
		senders   = 16
		recommend = time.Hour
	)
	names := 10_000
	if !redistest.Real() {
		names = 2_000
	}
	t.Run("with counter expiry", func(t *testing.T) {
		t.Parallel()
		expiry, opts := recommend, []fencing.Option{fencing.WithCounterExpiry(recommend)}
		if redistest.Real() {
			expiry = 2 * time.Second
			opts = []fencing.Option{fencing.WithCounterExpiry(expiry), fencing.WithTTL(time.Second)}
		}
		v := newEnv(t, d, opts...)
		v.e.Add(http.MethodPut, "/orders/:id", func(r Request) error { return r.NoContent(http.StatusNoContent) },
			v.mw(Config{Namespace: "order"}))
		sendDistinct(t, v, "/orders/", names, senders)
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
	})
	t.Run("without counter expiry", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, d)
		v.e.Add(http.MethodPut, "/orders/:id", func(r Request) error { return r.NoContent(http.StatusNoContent) },
			v.mw(Config{Namespace: "order"}))
		sendDistinct(t, v, "/orders/", contrast, senders)
		v.r.Advance(3 * time.Second) // past the real-Redis expiry above
		if v.r.Mini != nil {
			v.r.Mini.FastForward(recommend)
		}
		if n := len(v.keys("*:fence")); n != contrast {
			t.Errorf("got %d counters left after %d names, want %d: without expiry every name leaves one", n, contrast, contrast)
		}
	})
}

// sendDistinct sends n PUT requests to prefix+"<i>", each with an id of its own, from
// senders goroutines, and fails the test unless every one is answered 204.
func sendDistinct(t *testing.T, v *env, prefix string, n, senders int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	codes := make([]map[int]int, senders)
	for s := range senders {
		codes[s] = map[int]int{}
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				codes[s][v.serve(http.MethodPut, prefix+"id-"+strconv.FormatInt(i, 10)).Code]++
			}
		})
	}
	wg.Wait()
	total := map[int]int{}
	for _, c := range codes {
		for code, k := range c {
			total[code] += k
		}
	}
	if total[http.StatusNoContent] != n {
		t.Fatalf("got statuses %v for %d distinct names, want all 204", total, n)
	}
}
