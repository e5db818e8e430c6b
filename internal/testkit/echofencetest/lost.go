package echofencetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

// lostLock sends requests whose handlers return an error that says the lock was lost, through
// a real HTTP server: a store's stale token or fencing.ErrNotHeld, wrapped with %w, is
// answered 503 with Retry-After by the default LostHandler (or as a LostHandler of one's own
// says), unless the handler already wrote its response or chose a status, which stand; other
// errors, and skipped requests, reach Echo unchanged.
func lostLock(t *testing.T, m Major) {
	v := newEnv(t, m)
	stale := &store.StaleTokenError{Resource: "item:1", Token: 3, Mark: 4}
	wrapped := fmt.Errorf("saving item: %w", stale)
	notHeld := fmt.Errorf("saving item: %w", fencing.ErrNotHeld)
	teapot := m.NewHTTPError(http.StatusTeapot, wrapped)
	boom := errors.New("boom")
	conflict := func(_ Request, _ string, err error) error { return m.NewHTTPError(http.StatusConflict, err) }
	several := func(r Request) ([]string, error) { return []string{r.Param("id"), "other"}, nil }
	lost := func(resource string) string { return "the lock on " + resource + " was lost while the request ran" }
	for _, tc := range []struct {
		name, method, route string
		cfg                 Config
		err                 error // what the handler returns
		status              int
		message             string // the body's message; "" for a body not checked
		same                bool   // the handler's error reaches Echo as it is, without Retry-After
	}{
		{"wrapped stale token", http.MethodPut, "/token/:id", Config{}, wrapped, http.StatusServiceUnavailable, lost("/token/:id 1"), false},
		{"bare stale token", http.MethodPut, "/bare/:id", Config{}, store.ErrStaleToken, http.StatusServiceUnavailable, lost("/bare/:id 1"), false},
		{"wrapped ErrNotHeld", http.MethodPut, "/notheld/:id", Config{}, notHeld, http.StatusServiceUnavailable, lost("/notheld/:id 1"), false},
		{"default handlers given", http.MethodPut, "/defaults/:id", Config{DefaultHandlers: true}, wrapped, http.StatusServiceUnavailable, lost("/defaults/:id 1"), false},
		{"LostHandler of one's own", http.MethodPut, "/custom/:id", Config{LostHandler: conflict}, wrapped, http.StatusConflict, "Conflict", false},
		{"namespace", http.MethodPut, "/namespace/:id", Config{Namespace: "item"}, wrapped, http.StatusServiceUnavailable, lost("item:1"), false},
		{"several resources: the first", http.MethodPut, "/several/:id", Config{Namespace: "item", KeysExtractor: several}, wrapped, http.StatusServiceUnavailable, lost("item:1"), false},
		{"locked request of a skipping route", http.MethodPut, "/skipped/:id", Config{SkipSafeMethods: true}, wrapped, http.StatusServiceUnavailable, lost("/skipped/:id 1"), false},
		{"skipped request: no lock", http.MethodGet, "/skipped/:id", Config{SkipSafeMethods: true}, wrapped, http.StatusInternalServerError, "", true},
		{"response already written", http.MethodPut, "/written/:id", Config{}, wrapped, http.StatusAccepted, "", true},
		{"status of the handler's own", http.MethodPut, "/status/:id", Config{}, teapot, http.StatusTeapot, "", true},
		{"another error", http.MethodPut, "/plain/:id", Config{}, boom, http.StatusInternalServerError, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.e.Add(tc.method, tc.route, func(r Request) error {
				if tc.route == "/written/:id" {
					if err := r.String(http.StatusAccepted, "queued"); err != nil {
						return err
					}
				}
				return tc.err
			}, v.mw(tc.cfg))
			r := sendTo(t, v.srv.Client(), v.srv.URL, tc.method, strings.Replace(tc.route, ":id", "1", 1), "", "")
			if tc.message != "" {
				assertMessage(t, r, tc.status, tc.message, "stale", "saving", "not held", "fencing", v.r.Prefix)
			} else if r.status != tc.status {
				t.Errorf("got status %d %q, want %d", r.status, r.body, tc.status)
			}
			if got := v.lastErr(); tc.same && got != tc.err { //nolint:errorlint // the very value must come through
				t.Errorf("got error %v, want the handler's error itself", got)
			} else if !tc.same {
				v.wantErr(t, tc.status, tc.err)
			}
			check(t, "Retry-After", r.header.Get("Retry-After"), map[bool]string{false: "1", true: ""}[tc.same])
			if tc.route == "/written/:id" && r.body != "queued" {
				t.Errorf("got body %q, want the handler's own \"queued\"", r.body)
			}
		})
	}
	v.waitNoLocks()
}

// lostLockForReal loses the lock while the handler runs (its key is deleted): the handler's
// context is cancelled with a cause matching fencing.ErrNotHeld, the handler returns that
// cause, and the client gets 503 with Retry-After.
func lostLockForReal(t *testing.T, m Major) {
	v := newEnv(t, m)
	rec := v.loseWhileRunning(func(cause error) error { return fmt.Errorf("saving item: %w", cause) }, v.deleteLocks)
	AssertMessage(t, rec, http.StatusServiceUnavailable, "the lock on /items/:id 1 was lost while the request ran")
	check(t, "Retry-After", rec.Header().Get("Retry-After"), "1")
	v.wantErr(t, http.StatusServiceUnavailable, fencing.ErrNotHeld)
}

// lockLostCancelsContext loses the lock while the handler runs, its key deleted or its
// lease expired: the handler's context is cancelled with a cause matching
// fencing.ErrNotHeld, and the handler's own error reaches Echo as it is, not joined with the
// loss.
func lockLostCancelsContext(t *testing.T, m Major) {
	run := func(t *testing.T, v *env, lose func()) {
		teapot := m.StatusError(http.StatusTeapot)
		check(t, "status (the handler's)", v.loseWhileRunning(func(error) error { return teapot }, lose).Code, http.StatusTeapot)
		if err := v.lastErr(); err != teapot { //nolint:errorlint // the very value must come through
			t.Errorf("got error %v, want the handler's error itself", err)
		}
	}
	parallel(t, m, "key deleted", func(t *testing.T, v *env) { run(t, v, v.deleteLocks) })
	parallel(t, m, "lease expired", func(t *testing.T, v *env) {
		if v.r.Mini == nil {
			t.Skip("needs miniredis FastForward: renewals keep a real lease alive")
		}
		run(t, v, func() { v.r.Mini.FastForward(2 * lostTTL) })
	})
}

// loseWhileRunning serves PUT /items/1, under a lease of 300ms, with a handler that waits
// for its request's context to end and returns what ret makes of the context's cause; lose
// loses the lock once the handler is in. It checks that the cause matches
// fencing.ErrNotHeld and returns the response.
func (v *env) loseWhileRunning(ret func(cause error) error, lose func()) *httptest.ResponseRecorder {
	v.t.Helper()
	entered := make(chan struct{})
	cause := make(chan error, 1)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		ctx := r.Request().Context()
		awaitCancel(ctx, entered, cause)
		return ret(context.Cause(ctx))
	}, v.mw(Config{TTL: lostTTL}))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- v.serve(http.MethodPut, "/items/1") }()
	recv(v.t, entered, "the handler")
	lose()
	if err := recv(v.t, cause, "the handler's context"); !errors.Is(err, fencing.ErrNotHeld) {
		v.t.Errorf("got cause %v, want one matching fencing.ErrNotHeld", err)
	}
	return recv(v.t, done, "the response")
}

// lostTTL is the lease of the locks that loseWhileRunning loses: one a loaded machine cannot
// let run out on its own before the test takes it away (renewals go every third of it).
const lostTTL = 3 * time.Second

// deleteLocks deletes the test's held locks' keys in Redis.
func (v *env) deleteLocks() {
	v.t.Helper()
	keys := v.lockKeys()
	if len(keys) == 0 {
		v.t.Fatal("no held lock to delete: the handler's lock is gone already")
	}
	if err := v.r.Client.Del(context.Background(), keys...).Err(); err != nil {
		v.t.Fatal(err)
	}
}
