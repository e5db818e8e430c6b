package echofence_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	echo4 "github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw4 "github.com/fencekit/fencekit/middleware"
	fencemw5 "github.com/fencekit/fencekit/middleware-v5"
)

// TestMajorsShareLocks runs one service on Echo v4 and on Echo v5 at once, as during a
// rolling move from one to the other, on the same Redis and prefix: both name a request's
// lock alike, so a v5 instance waits for, or is denied by, a v4 instance holding the same
// order, for default names and Namespace names, and the tokens of one resource keep
// increasing across both.
func TestMajorsShareLocks(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()

	entered, release := make(chan string, 1), make(chan struct{})
	tokens := make(chan int64, 8)
	e4 := echo4.New()
	block := func(c echo4.Context) error {
		tok, _ := fencemw4.TokenFromEcho(c)
		tokens <- tok
		entered <- c.Param("id")
		<-release
		return c.NoContent(http.StatusNoContent)
	}
	e4.PUT("/orders/:id", block, fencemw4.Fence(l))
	e4.POST("/pay/:id", block, fencemw4.FenceWithConfig(fencemw4.Config{Locker: l, Namespace: "order"}))
	e5 := echo5.New()
	quick := func(c *echo5.Context) error {
		tok, _ := fencemw5.TokenFromEcho(c)
		tokens <- tok
		return c.NoContent(http.StatusNoContent)
	}
	e5.PUT("/orders/:id", quick, fencemw5.Fence(l))
	e5.POST("/pay/:id", quick, fencemw5.FenceWithConfig(fencemw5.Config{Locker: l, Namespace: "order"}))

	send := func(h http.Handler, method, target string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec.Code
	}
	for _, target := range []struct{ method, path string }{{http.MethodPut, "/orders/7"}, {http.MethodPost, "/pay/7"}} {
		done := make(chan int, 1)
		go func() { done <- send(e4, target.method, target.path) }()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s: the v4 handler did not start", target.method, target.path)
		}
		held := <-tokens
		if code := send(e5, target.method, target.path); code != http.StatusLocked {
			t.Errorf("%s %s on v5 while v4 holds it: got status %d, want 423", target.method, target.path, code)
		}
		release <- struct{}{}
		if code := <-done; code != http.StatusNoContent {
			t.Fatalf("%s %s on v4: got status %d, want 204", target.method, target.path, code)
		}
		if code := send(e5, target.method, target.path); code != http.StatusNoContent {
			t.Fatalf("%s %s on v5 once v4 released it: got status %d, want 204", target.method, target.path, code)
		}
		if next := <-tokens; next <= held {
			t.Errorf("%s %s: token %d on v5 after %d on v4, want it higher", target.method, target.path, next, held)
		}
	}
	// The two targets are two locks, "/orders/:id 7" and "order:7", each with its counter.
	for _, name := range []string{"{/orders/:id 7}", "{order:7}"} {
		if n := r.Client.Exists(t.Context(), r.Prefix+name+":fence").Val(); n != 1 {
			t.Errorf("counter of %s: got %d keys, want 1", name, n)
		}
	}
}
