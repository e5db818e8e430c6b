package fencingtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/fencingtest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A fenced store for the tests: write records value for resource under token, and reports
// the store's refusal of a stale one (store.ErrStaleToken).
type fenced struct {
	name  string
	write func(ctx context.Context, resource string, token int64, value string) error
}

// stores returns the stores Stall is tested with: store.Memory, store.Redis, and store.Table
// on the PostgreSQL of FENCING_DATABASE_URL (left out when it is unset, unless
// FENCING_REQUIRE_POSTGRES=1, which makes it a failure).
func stores(t *testing.T, r *redistest.Redis) []fenced {
	t.Helper()
	var mem store.Memory
	rs := store.NewRedis(r.Client)
	out := []fenced{
		{"memory", func(_ context.Context, resource string, token int64, _ string) error {
			return mem.Write(resource, token, func() error { return nil })
		}},
		{"redis", func(ctx context.Context, resource string, token int64, value string) error {
			return rs.Write(ctx, r.Prefix+resource, token, value)
		}},
	}
	dsn := os.Getenv("FENCING_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("FENCING_REQUIRE_POSTGRES") == "1" {
			t.Fatal("FENCING_REQUIRE_POSTGRES=1 but FENCING_DATABASE_URL is not set")
		}
		t.Log("FENCING_DATABASE_URL unset: store.Table is left out")
		return out
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	name := fmt.Sprintf("fk_stall_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE "+name+" (id text PRIMARY KEY, v text, fence_token bigint NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+name) })
	if _, err := db.ExecContext(t.Context(), "INSERT INTO "+name+" (id) VALUES ('acct'), ('acct:1')"); err != nil {
		t.Fatal(err)
	}
	table, err := store.NewTable(name)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, fenced{"table", func(ctx context.Context, resource string, token int64, value string) error {
		return table.Update(ctx, db, resource, token, "v = $1", value)
	}})
}

// stalled runs the holder's side of every test: under the lock of resource whose token is
// token, it starts a successor (which takes the lock and writes with its own token as soon as
// the holder is stalled), stalls, waits for the successor's write, and checks that the
// holder's own late write is refused.
func stalled(ctx context.Context, resource string, token int64, st fenced, successor func(write func(context.Context, int64) error) error) error {
	written := make(chan error, 1)
	go func() {
		written <- successor(func(ctx context.Context, next int64) error {
			return st.write(ctx, resource, next, "successor")
		})
	}()
	if err := fencingtest.Stall(ctx); err != nil {
		return fmt.Errorf("Stall: %w", err)
	}
	if ctx.Err() != nil {
		return errors.New("Stall cancelled the holder's context")
	}
	if until, ok := fencing.ValidUntilFromContext(ctx); ok && time.Now().Before(until) {
		return fmt.Errorf("after Stall the lease lasts until %v", until)
	}
	if err := <-written; err != nil {
		return fmt.Errorf("successor: %w", err)
	}
	err := st.write(ctx, resource, token, "stalled holder")
	if !errors.Is(err, store.ErrStaleToken) {
		return fmt.Errorf("the stalled holder's write: got %v, want it refused (ErrStaleToken)", err)
	}
	return nil
}

// doSuccessor is a successor that takes resource with Do.
func doSuccessor(l *fencing.Locker, resource string) func(write func(context.Context, int64) error) error {
	return func(write func(context.Context, int64) error) error {
		return l.Do(context.Background(), resource, func(ctx context.Context) error {
			token, _ := fencing.TokenFor(ctx, resource)
			return write(ctx, token)
		})
	}
}

func newLocker(t *testing.T, r *redistest.Redis) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix), fencing.WithTTL(5*time.Second))
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestStallNoLock checks Stall outside work that holds a lock.
func TestStallNoLock(t *testing.T) {
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"token only": fencing.ContextWithToken(context.Background(), 7),
	} {
		if err := fencingtest.Stall(ctx); !errors.Is(err, fencingtest.ErrNoLock) {
			t.Errorf("%s: got %v, want ErrNoLock", name, err)
		}
	}
}

// TestStallHolders stalls each kind of holder (Do, DoAll, Lead, the Echo middleware, the
// Asynq adapter) with each store: the holder's context stays alive, the successor takes the
// lock and writes, and the stalled holder's write is refused.
func TestStallHolders(t *testing.T) {
	r := redistest.New(t)
	for _, st := range stores(t, r) {
		t.Run(st.name, func(t *testing.T) {
			l, next := newLocker(t, r), newLocker(t, r)

			t.Run("Do", func(t *testing.T) {
				err := l.Do(t.Context(), "acct", func(ctx context.Context) error {
					token, _ := fencing.TokenFromContext(ctx)
					return stalled(ctx, "acct", token, st, doSuccessor(next, "acct"))
				})
				if err == nil || !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatalf("Do: got %v, want nil joined with ErrNotHeld (the lock lost)", err)
				}
				if err := errors.Unwrap(err); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatal(err)
				}
			})

			t.Run("DoAll", func(t *testing.T) {
				err := l.DoAll(t.Context(), []string{"acct", "other"}, func(ctx context.Context) error {
					token, _ := fencing.TokenFor(ctx, "acct")
					return stalled(ctx, "acct", token, st, doSuccessor(next, "acct"))
				})
				if !errors.Is(err, fencing.ErrNotHeld) {
					t.Fatalf("DoAll: got %v, want ErrNotHeld", err)
				}
			})

			t.Run("Lead", func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var got error
				err := l.Lead(ctx, "acct", func(ctx context.Context) error {
					token, _ := fencing.TokenFromContext(ctx)
					got = stalled(ctx, "acct", token, st, func(write func(context.Context, int64) error) error {
						return next.Lead(ctx, "acct", func(ctx context.Context) error {
							token, _ := fencing.TokenFromContext(ctx)
							return write(ctx, token) // then resigns: Lead returns nil
						})
					})
					cancel() // ends Lead once this term is over
					return got
				})
				if got != nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("Lead: %v, then %v", got, err)
				}
			})

			t.Run("echo", func(t *testing.T) {
				e := echo.New()
				var got error
				// Namespace "acct" and the key 1 lock "acct:1".
				e.PUT("/accounts/:id", func(c echo.Context) error {
					token, _ := fencemw.TokenFromEcho(c)
					got = stalled(c.Request().Context(), "acct:1", token, st, doSuccessor(next, "acct:1"))
					return c.NoContent(http.StatusOK)
				}, fencemw.FenceWithConfig(fencemw.Config{Locker: l, Namespace: "acct"}))
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/accounts/1", nil))
				if got != nil {
					t.Fatal(got)
				}
			})

			t.Run("asynq", func(t *testing.T) {
				var got error
				h := asynqfence.Wrap(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
					token, _ := fencing.TokenFromContext(ctx)
					got = stalled(ctx, "acct", token, st, doSuccessor(next, "acct"))
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
