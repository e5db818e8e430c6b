package echofencetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	route := func(method, path string, cfg Config, err error) {
		v.e.Add(method, path, func(Request) error { return err }, v.mw(cfg))
	}
	route(http.MethodPut, "/token/:id", Config{}, wrapped)
	route(http.MethodPut, "/bare/:id", Config{}, store.ErrStaleToken)
	route(http.MethodPut, "/notheld/:id", Config{}, notHeld)
	route(http.MethodPut, "/defaults/:id", Config{DefaultHandlers: true}, wrapped)
	route(http.MethodPut, "/custom/:id", Config{LostHandler: conflict}, wrapped)
	route(http.MethodPut, "/namespace/:id", Config{Namespace: "item"}, wrapped)
	route(http.MethodPut, "/several/:id", Config{Namespace: "item", KeysExtractor: func(r Request) ([]string, error) {
		return []string{r.Param("id"), "other"}, nil
	}}, wrapped)
	route(http.MethodPut, "/skipped/:id", Config{SkipSafeMethods: true}, wrapped)
	route(http.MethodGet, "/skipped/:id", Config{SkipSafeMethods: true}, wrapped)
	v.e.Add(http.MethodPut, "/written/:id", func(r Request) error {
		if err := r.String(http.StatusAccepted, "queued"); err != nil {
			return err
		}
		return wrapped
	}, v.mw(Config{}))
	route(http.MethodPut, "/status/:id", Config{}, teapot)
	route(http.MethodPut, "/plain/:id", Config{}, boom)

	lostBody := func(resource string) string { return "the lock on " + resource + " was lost while the request ran" }
	for _, tc := range []struct {
		name, method, path string
		handlerErr         error // what the handler returns
		status             int
		message            string // the body's message; "" for a body not checked
		retryAfter         string
		same               bool // the handler's error reaches Echo as it is
	}{
		{"wrapped stale token", http.MethodPut, "/token/1", wrapped, http.StatusServiceUnavailable, lostBody("/token/:id 1"), "1", false},
		{"bare stale token", http.MethodPut, "/bare/1", store.ErrStaleToken, http.StatusServiceUnavailable, lostBody("/bare/:id 1"), "1", false},
		{"wrapped ErrNotHeld", http.MethodPut, "/notheld/1", notHeld, http.StatusServiceUnavailable, lostBody("/notheld/:id 1"), "1", false},
		{"default handlers given", http.MethodPut, "/defaults/1", wrapped, http.StatusServiceUnavailable, lostBody("/defaults/:id 1"), "1", false},
		{"LostHandler of one's own", http.MethodPut, "/custom/1", wrapped, http.StatusConflict, "Conflict", "1", false},
		{"namespace", http.MethodPut, "/namespace/1", wrapped, http.StatusServiceUnavailable, lostBody("item:1"), "1", false},
		{"several resources: the first", http.MethodPut, "/several/1", wrapped, http.StatusServiceUnavailable, lostBody("item:1"), "1", false},
		{"locked request of a skipping route", http.MethodPut, "/skipped/1", wrapped, http.StatusServiceUnavailable, lostBody("/skipped/:id 1"), "1", false},
		{"skipped request: no lock", http.MethodGet, "/skipped/1", wrapped, http.StatusInternalServerError, "", "", true},
		{"response already written", http.MethodPut, "/written/1", wrapped, http.StatusAccepted, "", "", true},
		{"status of the handler's own", http.MethodPut, "/status/1", teapot, http.StatusTeapot, "", "", true},
		{"another error", http.MethodPut, "/plain/1", boom, http.StatusInternalServerError, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sendTo(t, v.srv.Client(), v.srv.URL, tc.method, tc.path, "", "")
			if tc.message != "" {
				assertMessage(t, r, tc.status, tc.message, "stale", "saving", "not held", "fencing", v.r.Prefix)
			} else if r.status != tc.status {
				t.Errorf("got status %d %q, want %d", r.status, r.body, tc.status)
			}
			if got := r.header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("got Retry-After %q, want %q", got, tc.retryAfter)
			}
			if got := v.lastErr(); tc.same && got != tc.handlerErr { //nolint:errorlint // the very value must come through
				t.Errorf("got error %v, want the handler's error itself", got)
			} else if !tc.same {
				v.wantErr(t, tc.status, tc.handlerErr)
			}
			if tc.path == "/written/1" && r.body != "queued" {
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
	entered := make(chan struct{})
	cause := make(chan error, 1)
	v.e.Add(http.MethodPut, "/items/:id", func(r Request) error {
		ctx := r.Request().Context()
		awaitCancel(ctx, entered, cause)
		return fmt.Errorf("saving item: %w", context.Cause(ctx))
	}, v.mw(Config{TTL: 300 * time.Millisecond}))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- v.serve(http.MethodPut, "/items/1") }()
	recv(t, entered, "the handler")
	if err := v.r.Client.Del(t.Context(), v.lockKeys()...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, cause, "the handler's context"); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("got cause %v, want one matching fencing.ErrNotHeld", err)
	}
	rec := recv(t, done, "the response")
	AssertMessage(t, rec, http.StatusServiceUnavailable, "the lock on /items/:id 1 was lost while the request ran")
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("got Retry-After %q, want \"1\"", got)
	}
	v.wantErr(t, http.StatusServiceUnavailable, fencing.ErrNotHeld)
}
