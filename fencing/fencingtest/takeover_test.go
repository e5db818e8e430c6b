package fencingtest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/labstack/echo/v4"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

// tookOver runs the holder's side of every Takeover test: under the lock of resource whose
// token is token, Takeover runs a successor that writes with its own token, and the holder's
// late write after it is refused.
func tookOver(ctx context.Context, resource string, token int64, st fenced) error {
	var next int64
	err := fencingtest.Takeover(ctx, func(sctx context.Context) error {
		var ok bool
		if next, ok = fencing.TokenFor(sctx, resource); !ok {
			return errors.New("no token in the successor's context")
		}
		if next <= token {
			return fmt.Errorf("successor's token %d, not above the holder's %d", next, token)
		}
		if _, ok := fencing.TokenFor(sctx, "other"); ok {
			return errors.New("the successor's context carries the holder's other lock")
		}
		return st.write(sctx, resource, next, "successor")
	})
	if err != nil {
		return fmt.Errorf("Takeover: %w", err)
	}
	if next == 0 {
		return errors.New("Takeover returned without running the successor")
	}
	if ctx.Err() != nil {
		return errors.New("Takeover cancelled the holder's context")
	}
	if until, ok := fencing.ValidUntilFromContext(ctx); ok && time.Now().Before(until) {
		return fmt.Errorf("after Takeover the lease lasts until %v", until)
	}
	if err := st.write(ctx, resource, token, "stalled holder"); !errors.Is(err, store.ErrStaleToken) {
		return fmt.Errorf("the stalled holder's write: got %v, want it refused (ErrStaleToken)", err)
	}
	return nil
}

// TestTakeover runs a successor inside each kind of holder (Do, DoAll, Lead, the Echo
// middleware, the Asynq adapter) with each store.
func TestTakeover(t *testing.T) {
	r := redistest.New(t)
	for _, st := range stores(t, r) {
		t.Run(st.name, func(t *testing.T) {
			l := newLocker(t, r)

			t.Run("Do", func(t *testing.T) {
				err := l.Do(t.Context(), "acct", func(ctx context.Context) error {
					token, _ := fencing.TokenFromContext(ctx)
					return tookOver(ctx, "acct", token, st)
				})
				if !errors.Is(err, fencing.ErrNotHeld) || errors.Unwrap(err) != nil && !errors.Is(errors.Unwrap(err), fencing.ErrNotHeld) {
					t.Fatalf("Do: got %v, want only ErrNotHeld (the lock lost)", err)
				}
			})

			t.Run("DoAll", func(t *testing.T) {
				err := l.DoAll(t.Context(), []string{"acct", "other"}, func(ctx context.Context) error {
					token, _ := fencing.TokenFor(ctx, "acct")
					return tookOver(ctx, "acct", token, st)
				})
				if !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatalf("DoAll: got %v, want ErrNotHeld", err)
				}
			})

			t.Run("nested Do", func(t *testing.T) {
				// The successor takes the innermost hold's resource; the outer one stalls too.
				err := l.Do(t.Context(), "other", func(ctx context.Context) error {
					return l.Do(ctx, "acct", func(ctx context.Context) error {
						token, _ := fencing.TokenFor(ctx, "acct")
						return tookOver(ctx, "acct", token, st)
					})
				})
				if !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatalf("Do: got %v, want ErrNotHeld", err)
				}
			})

			t.Run("Lead", func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var got error
				err := l.Lead(ctx, "acct", func(ctx context.Context) error {
					token, _ := fencing.TokenFromContext(ctx)
					got = tookOver(ctx, "acct", token, st)
					cancel()
					return got
				})
				if got != nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("Lead: %v, then %v", got, err)
				}
			})

			t.Run("echo", func(t *testing.T) {
				e := echo.New()
				var got error
				e.PUT("/accounts/:id", func(c echo.Context) error {
					token, _ := fencemw.TokenFromEcho(c)
					got = tookOver(c.Request().Context(), "acct:1", token, st)
					return c.NoContent(http.StatusOK)
				}, fencemw.FenceWithConfig(fencemw.Config{Locker: l, Namespace: "acct"}))
				e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPut, "/accounts/1", nil))
				if got != nil {
					t.Fatal(got)
				}
			})

			t.Run("asynq", func(t *testing.T) {
				var got error
				h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
					token, _ := fencing.TokenFromContext(ctx)
					got = tookOver(ctx, "acct", token, st)
					return nil
				}), l, func(*asynq.Task) (string, error) { return "acct", nil })
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				_ = h.ProcessTask(ctx, asynq.NewTask("t", nil))
				if got != nil {
					t.Fatal(got)
				}
			})
		})
	}
}

// TestTakeoverErrors: outside a lock, with a nil successor, a successor's error, and a holder
// whose context ends while the successor waits behind another holder.
func TestTakeoverErrors(t *testing.T) {
	r := redistest.New(t)
	l, other := newLocker(t, r), newLocker(t, r)
	if err := fencingtest.Takeover(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, fencingtest.ErrNoLock) {
		t.Errorf("outside a lock: got %v, want ErrNoLock", err)
	}
	err := l.Do(t.Context(), "acct", func(ctx context.Context) error {
		if err := fencingtest.Takeover(ctx, nil); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("nil successor: got %v, want ErrInvalid", err)
		}
		if ctx.Err() != nil {
			t.Error("a nil successor stalled the holder")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do after a refused Takeover: %v, want nil (the lock kept)", err)
	}

	boom := errors.New("boom")
	err = l.Do(t.Context(), "acct", func(ctx context.Context) error {
		return fencingtest.Takeover(ctx, func(context.Context) error { return boom })
	})
	if !errors.Is(err, boom) || !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("a successor's error: Do got %v, want boom and ErrNotHeld", err)
	}

	// Another holder queued first takes the resource and keeps it: the successor waits until
	// the holder's context ends, and is not called.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	queued := make(chan *fencing.Lock, 1)
	err = l.Do(ctx, "acct", func(ctx context.Context) error {
		go func() {
			lock, _ := other.Acquire(context.Background(), "acct")
			queued <- lock
		}()
		for { // until the other acquirer has queued
			st, err := l.Inspect(ctx, "acct")
			if err != nil {
				return err
			}
			if len(st.Waiters) > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		called := false
		var lock *fencing.Lock
		go func() { lock = <-queued; cancel() }()
		err := fencingtest.Takeover(ctx, func(context.Context) error { called = true; return nil })
		if called || !errors.Is(err, context.Canceled) {
			t.Errorf("behind another holder, ctx cancelled: got %v (called %v), want context.Canceled", err, called)
		}
		if lock == nil {
			t.Fatal("the other acquirer did not take the lock")
		}
		return lock.Release(context.Background())
	})
	if err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatal(err)
	}
}
