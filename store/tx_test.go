package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Compile-time checks: every pgx connection type begins a PgxTx.
var (
	_ PgxBeginner = (*pgxpool.Pool)(nil)
	_ PgxBeginner = (*pgxpool.Conn)(nil)
	_ PgxBeginner = (*pgx.Conn)(nil)
	_ PgxBeginner = (pgx.Tx)(nil)
)

// txRun runs fn in a fenced transaction as one of Tx and PgxTx does, with the
// transaction as a DB.
type txRun func(ctx context.Context, f *Fences, resource string, token int64, fn func(DB) error) error

// txKind opens a txRun on the PostgreSQL of a connection string.
type txKind struct {
	name string
	open func(t *testing.T, dsn string) txRun
}

// txKinds are Tx on database/sql, and PgxTx on a pool, a connection and a pgx.Tx (a
// savepoint in an outer transaction, which the run commits after PgxTx returns,
// whatever it returned: a refused or failed PgxTx leaves it usable).
func txKinds() []txKind {
	return []txKind{
		{"Tx", func(t *testing.T, dsn string) txRun {
			db := openSQL(t, dsn)
			return func(ctx context.Context, f *Fences, resource string, token int64, fn func(DB) error) error {
				return f.Tx(ctx, db, resource, token, func(tx *sql.Tx) error { return fn(tx) })
			}
		}},
		{"PgxTx/*pgxpool.Pool", func(t *testing.T, dsn string) txRun {
			pool := openPool(t, dsn)
			return func(ctx context.Context, f *Fences, resource string, token int64, fn func(DB) error) error {
				return f.PgxTx(ctx, pool, resource, token, func(tx pgx.Tx) error { return fn(Pgx(tx)) })
			}
		}},
		{"PgxTx/*pgx.Conn", func(t *testing.T, dsn string) txRun {
			conn := openConn(t, dsn)
			return func(ctx context.Context, f *Fences, resource string, token int64, fn func(DB) error) error {
				return f.PgxTx(ctx, conn, resource, token, func(tx pgx.Tx) error { return fn(Pgx(tx)) })
			}
		}},
		{"PgxTx/pgx.Tx", func(t *testing.T, dsn string) txRun {
			conn := openConn(t, dsn)
			return func(ctx context.Context, f *Fences, resource string, token int64, fn func(DB) error) error {
				outer, err := conn.Begin(context.Background())
				if err != nil {
					return fmt.Errorf("outer begin: %w", err)
				}
				defer func() { _ = outer.Rollback(context.Background()) }()
				err = f.PgxTx(ctx, outer, resource, token, func(tx pgx.Tx) error { return fn(Pgx(tx)) })
				if cerr := outer.Commit(context.Background()); cerr != nil {
					t.Errorf("outer commit after PgxTx returned %v: %v", err, cerr)
				}
				return err
			}
		}},
	}
}

// databaseURL returns FENCING_DATABASE_URL with the session parameter name set to
// value; call postgres(t) first.
func databaseURL(t *testing.T, name, value string) string {
	t.Helper()
	dsn := os.Getenv(envDatabaseURL)
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dsn + " " + name + "='" + value + "'" // keyword/value form
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	return u.String()
}

func openSQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(inFlight)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("pgx.Connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// markOf returns resource's fence row token, 0 when it has none.
func markOf(t *testing.T, db *sql.DB, fences *Fences, resource string) int64 {
	t.Helper()
	mark, err := fences.Mark(t.Context(), db, resource)
	if errors.Is(err, ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("Mark(%s): %v", resource, err)
	}
	return mark
}

// vals returns the val column of the test table, by id.
func vals(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT val FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFences_Tx: what each way out of a fenced transaction commits, returns and
// leaves in the data table and the fence row, for Tx and each PgxBeginner.
func TestFences_Tx(t *testing.T) {
	db := postgres(t)
	errFn := errors.New("fn failed")
	type boom struct{ s string }
	panicValue := &boom{"fn panicked"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name  string
		mark  int64 // the fence row's token before; 0: no row yet
		token int64
		ctx   context.Context
		// body runs in fn after its write; its error is fn's.
		body       func(ctx context.Context, tx DB) error
		wantCalled bool
		wantMark   int64
		wantVals   []string
		// check checks Tx's error, what the test recovered from a panic, and fn's error;
		// resource is the fence row's name.
		check func(t *testing.T, err error, recovered any, fnErr error, resource string)
	}{
		{name: "fresh token commits", mark: 3, token: 5, wantCalled: true, wantMark: 5, wantVals: []string{"written"}},
		{name: "first use creates the fence row", token: 1, wantCalled: true, wantMark: 1, wantVals: []string{"written"}},
		{name: "equal token commits", mark: 5, token: 5, wantCalled: true, wantMark: 5, wantVals: []string{"written"}},
		{name: "stale token: refused, fn not called", mark: 9, token: 5, wantMark: 9,
			check: func(t *testing.T, err error, _ any, _ error, resource string) { wantStale(t, err, resource, 5, 9) }},
		{name: "fn error: rolled back, returned as it is", mark: 3, token: 5, wantCalled: true, wantMark: 3,
			body: func(context.Context, DB) error { return errFn },
			check: func(t *testing.T, err error, _ any, _ error, _ string) {
				if err != errFn { // the very error, not wrapped
					t.Errorf("got %v, want fn's error itself", err)
				}
			}},
		{name: "fn statement fails: rolled back, returned as it is", mark: 3, token: 5, wantCalled: true, wantMark: 3,
			body: func(ctx context.Context, tx DB) error {
				_, err := tx.ExecContext(ctx, "SELECT 1/0")
				return err
			},
			check: func(t *testing.T, err error, _ any, fnErr error, _ string) {
				var pgErr *pgconn.PgError
				if err != fnErr || !errors.As(err, &pgErr) || pgErr.Code != "22012" {
					t.Errorf("got %v, want fn's error itself (division by zero, 22012)", err)
				}
			}},
		{name: "fn panics: rolled back, the panic goes on", mark: 3, token: 5, wantCalled: true, wantMark: 3,
			body: func(context.Context, DB) error { panic(panicValue) },
			check: func(t *testing.T, _ error, recovered any, _ error, _ string) {
				if recovered != panicValue {
					t.Errorf("recovered %v, want fn's panic value", recovered)
				}
			}},
		{name: "ctx done before begin: nothing runs", mark: 3, token: 5, ctx: cancelled, wantMark: 3,
			check: func(t *testing.T, err error, _ any, _ error, _ string) {
				if !errors.Is(err, context.Canceled) || errors.Is(err, ErrStaleToken) {
					t.Errorf("got %v, want an error matching context.Canceled", err)
				}
			}},
	}
	for _, kind := range txKinds() {
		t.Run(kind.name, func(t *testing.T) {
			run := kind.open(t, os.Getenv(envDatabaseURL))
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ctx := tt.ctx
					if ctx == nil {
						ctx = t.Context()
					}
					fences, _ := testFences(t, db)
					data := testTable(t, db, false)
					if tt.mark > 0 {
						if err := fences.Check(t.Context(), db, "r", tt.mark); err != nil {
							t.Fatal(err)
						}
					}
					called := false
					var fnErr, err error
					var recovered any
					func() {
						defer func() { recovered = recover() }()
						err = run(ctx, fences, "r", tt.token, func(tx DB) error {
							called = true
							if _, err := tx.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES (1, 'written')"); err != nil {
								return err
							}
							if tt.body != nil {
								fnErr = tt.body(ctx, tx)
							}
							return fnErr
						})
					}()
					if tt.check != nil {
						tt.check(t, err, recovered, fnErr, fences.table+"/r")
					} else if err != nil || recovered != nil {
						t.Errorf("got %v (recovered %v), want nil", err, recovered)
					}
					if called != tt.wantCalled {
						t.Errorf("fn called: got %v, want %v", called, tt.wantCalled)
					}
					if got := markOf(t, db, fences, "r"); got != tt.wantMark {
						t.Errorf("fence row: got %d, want %d", got, tt.wantMark)
					}
					if got := vals(t, db, data); !slices.Equal(got, tt.wantVals) {
						t.Errorf("data: got %q, want %q", got, tt.wantVals)
					}
				})
			}
		})
	}
}

// TestFences_Tx_connections: after each way out, including a panic, Tx and PgxTx
// have given their connection back to the pool.
func TestFences_Tx_connections(t *testing.T) {
	db := postgres(t)
	pool := openPool(t, os.Getenv(envDatabaseURL))
	fences, _ := testFences(t, db)
	ctx := t.Context()
	if err := fences.Check(ctx, db, "r", 9); err != nil {
		t.Fatal(err)
	}
	ways := map[string]func() error{
		"commit":   func() error { return nil },
		"fn error": func() error { return errors.New("fn failed") },
		"panic":    func() error { panic("fn panicked") },
	}
	for name, way := range ways {
		for _, token := range []int64{9, 5} { // admitted, stale
			func() {
				defer func() { _ = recover() }()
				_ = fences.Tx(ctx, db, "r", token, func(*sql.Tx) error { return way() })
			}()
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("Tx, %s, token %d: %d connections in use, want 0", name, token, n)
			}
			func() {
				defer func() { _ = recover() }()
				_ = fences.PgxTx(ctx, pool, "r", token, func(pgx.Tx) error { return way() })
			}()
			if n := pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("PgxTx, %s, token %d: %d connections acquired, want 0", name, token, n)
			}
		}
	}
}

// TestFences_Tx_fnEndsTx: a fn that commits the transaction itself makes Tx's commit
// fail, and that error comes back wrapped.
func TestFences_Tx_fnEndsTx(t *testing.T) {
	db := postgres(t)
	fences, _ := testFences(t, db)
	ctx := t.Context()
	err := fences.Tx(ctx, db, "r", 1, func(tx *sql.Tx) error { return tx.Commit() })
	if want := `store: tx "` + fences.table + `/r": commit: `; !errors.Is(err, sql.ErrTxDone) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Tx: got %v, want sql.ErrTxDone wrapped as %q…", err, want)
	}
	err = fences.PgxTx(ctx, openPool(t, os.Getenv(envDatabaseURL)), "r", 1, func(tx pgx.Tx) error { return tx.Commit(ctx) })
	if want := `store: pgx tx "` + fences.table + `/r": commit: `; !errors.Is(err, pgx.ErrTxClosed) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("PgxTx: got %v, want pgx.ErrTxClosed wrapped as %q…", err, want)
	}
}

// TestFences_Tx_badInput: what Check rejects, and a nil db or fn, is refused with
// ErrInvalid before anything runs.
func TestFences_Tx_badInput(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	fences, name := testFences(t, db)
	pool := openPool(t, os.Getenv(envDatabaseURL))
	var nilFences *Fences
	called := false
	sqlFn := func(*sql.Tx) error { called = true; return nil }
	pgxFn := func(pgx.Tx) error { called = true; return nil }
	tests := []struct {
		name     string
		fences   *Fences
		db       *sql.DB
		pool     PgxBeginner
		resource string
		token    int64
		nilFn    bool
	}{
		{"zero token", fences, db, pool, "r", 0, false},
		{"negative token", fences, db, pool, "r", -1, false},
		{"empty resource", fences, db, pool, "", 1, false},
		{"nil db", fences, nil, nil, "r", 1, false},
		{"typed nil db", fences, (*sql.DB)(nil), (*pgxpool.Pool)(nil), "r", 1, false},
		{"typed nil pgx.Tx", fences, nil, pgx.Tx((*fakeTx)(nil)), "r", 1, false},
		{"nil fn", fences, db, pool, "r", 1, true},
		{"empty table", NewFences(""), db, pool, "r", 1, false},
		{"nil *Fences", nilFences, db, pool, "r", 1, false},
		{"zero Fences", &Fences{}, db, pool, "r", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called = false
			sf, pf := sqlFn, pgxFn
			if tt.nilFn {
				sf, pf = nil, nil
			}
			if err := tt.fences.Tx(ctx, tt.db, tt.resource, tt.token, sf); !errors.Is(err, ErrInvalid) {
				t.Errorf("Tx: got %v, want an error matching ErrInvalid", err)
			}
			if err := tt.fences.PgxTx(ctx, tt.pool, tt.resource, tt.token, pf); !errors.Is(err, ErrInvalid) {
				t.Errorf("PgxTx: got %v, want an error matching ErrInvalid", err)
			}
			if called {
				t.Error("fn was called")
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil || n != 0 {
				t.Errorf("fence rows: got %d, %v; want 0", n, err)
			}
		})
	}
}

// fakeTx is a pgx.Tx type whose nil pointer PgxTx must refuse.
type fakeTx struct{ pgx.Tx }

// TestFences_Tx_concurrent runs transactions of writers holding tokens 1..n (each
// token twice, shuffled within a window) through Tx and PgxTx, each appending its
// token to a data row's history: the history, in commit order, never goes down (0
// stale writes), every transaction that Tx reported committed is in it, and fn ran
// exactly for those.
func TestFences_Tx_concurrent(t *testing.T) {
	const n = 60
	db := postgres(t)
	for _, kind := range txKinds()[:2] {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			run := kind.open(t, os.Getenv(envDatabaseURL))
			fences, _ := testFences(t, db)
			data := testTable(t, db, true)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+data+" (id) VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			ws := schedule(t, n)
			var calls atomic.Int64
			errs := runAll(ws, func(w writer) error {
				return run(ctx, fences, "acct:1", w.token, func(tx DB) error {
					calls.Add(1)
					_, err := tx.ExecContext(ctx, "UPDATE "+data+" SET history = array_append(history, $1::bigint) WHERE id = 1", w.token)
					return err
				})
			})
			accepted := 0
			for i, w := range ws {
				if errs[i] == nil {
					accepted++
					continue
				}
				var stale *StaleTokenError
				if !errors.As(errs[i], &stale) || stale.Mark <= w.token {
					t.Errorf("writer %d (token %d): got %v, want a StaleTokenError", w.id, w.token, errs[i])
				}
			}
			_, _, history := row(t, db, data, 1)
			stale := 0
			for i := 1; i < len(history); i++ {
				if history[i] < history[i-1] {
					stale++
				}
			}
			if stale != 0 {
				t.Errorf("stale writes accepted: got %d, want 0 (history %v)", stale, history)
			}
			if len(history) != accepted || calls.Load() != int64(accepted) {
				t.Errorf("writes applied: got %d, fn calls %d; want %d each (every committed transaction, and only those)",
					len(history), calls.Load(), accepted)
			}
			if m := markOf(t, db, fences, "acct:1"); m != n || len(history) == 0 || history[len(history)-1] != n {
				t.Errorf("final mark %d, last write %v; want %d for both", m, history, n)
			}
			t.Logf("%d transactions: %d committed, %d refused", len(ws), accepted, len(ws)-accepted)
		})
	}
}

// waitLockOn waits until a backend waits for a lock in a statement on table
// (pg_stat_activity), or fails t after 10 seconds or when done, the waiter's result,
// comes first.
func waitLockOn(t *testing.T, db *sql.DB, table string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("the waiter returned %v before waiting for the lock", err)
		default:
		}
		var n int
		err := db.QueryRowContext(t.Context(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0", table).Scan(&n)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend waits for a lock on %s after 10s", table)
		}
		time.Sleep(time.Millisecond) // polls for an event in another process
	}
}

// TestFences_Tx_isolation shows what a fenced transaction does when its Check waits
// for a concurrent holder's transaction on the fence row, at each isolation level
// (set for the session in the connection string, default_transaction_isolation):
// at READ COMMITTED it is admitted or refused by the committed row; at REPEATABLE
// READ and SERIALIZABLE a committed change of the row fails it with a serialization
// failure (40001) whatever the tokens, before fn runs and with nothing written, and
// the retried Tx is admitted or refused as at READ COMMITTED. A holder that rolls
// back changes nothing: the waiting transaction goes on at every level.
func TestFences_Tx_isolation(t *testing.T) {
	db := postgres(t)
	const (
		ok     = "admitted"
		stale  = "stale"
		serial = "40001"
	)
	type outcomes struct{ readCommitted, repeatable, serializable, retry string }
	cases := []struct {
		name    string
		holder  int64 // the token of the transaction holding the fence row (which starts at 5)
		commit  bool  // whether the holder commits
		token   int64
		outcome outcomes
	}{
		{"newer token, the holder commits", 6, true, 7, outcomes{ok, serial, serial, ok}},
		{"older token, the holder commits", 9, true, 8, outcomes{stale, serial, serial, stale}},
		{"newer token, the holder rolls back", 11, false, 12, outcomes{ok, ok, ok, ""}},
		{"older token, the holder rolls back", 11, false, 6, outcomes{ok, ok, ok, ""}},
	}
	levels := []struct {
		level string
		want  func(outcomes) string
	}{
		{"read committed", func(o outcomes) string { return o.readCommitted }},
		{"repeatable read", func(o outcomes) string { return o.repeatable }},
		{"serializable", func(o outcomes) string { return o.serializable }},
	}
	for _, kind := range txKinds()[:2] {
		for _, lv := range levels {
			t.Run(kind.name+"/"+lv.level, func(t *testing.T) {
				ctx := t.Context()
				run := kind.open(t, databaseURL(t, "default_transaction_isolation", lv.level))
				fences, table := testFences(t, db)
				data := testTable(t, db, false)
				for i, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						resource := fmt.Sprintf("r%d", i)
						holderID, waiterID := 2*i+1, 2*i+2
						if err := fences.Check(ctx, db, resource, 5); err != nil {
							t.Fatal(err)
						}
						// The holder: past its Check, it holds the fence row until released.
						checked, release := make(chan struct{}), make(chan struct{})
						holderDone := make(chan error, 1)
						errAbort := errors.New("holder rolls back")
						go func() {
							holderDone <- fences.Tx(ctx, db, resource, c.holder, func(tx *sql.Tx) error {
								close(checked)
								select {
								case <-release:
								case <-ctx.Done():
									return ctx.Err()
								}
								if !c.commit {
									return errAbort
								}
								_, err := tx.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES ($1, 'holder')", holderID)
								return err
							})
						}()
						select {
						case <-checked:
						case err := <-holderDone:
							t.Fatalf("holder Tx(%d) = %v before its fn", c.holder, err)
						}
						// The waiter's Check waits on the row.
						var called atomic.Int32
						var seen atomic.Value
						waiter := func() error {
							return run(ctx, fences, resource, c.token, func(tx DB) error {
								called.Add(1)
								var level string
								if err := scanRow(ctx, tx, "SHOW transaction_isolation", nil, &level); err != nil {
									return err
								}
								seen.Store(level)
								_, err := tx.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES ($1, 'waiter')", waiterID)
								return err
							})
						}
						waiterDone := make(chan error, 1)
						go func() { waiterDone <- waiter() }()
						waitLockOn(t, db, table, waiterDone)
						close(release)
						if err := <-holderDone; (c.commit && err != nil) || (!c.commit && err != errAbort) {
							t.Fatalf("holder Tx(%d) = %v", c.holder, err)
						}
						err := <-waiterDone
						want := lv.want(c.outcome)
						checkOutcome(t, err, want, fences.table+"/"+resource, c.token)
						if want == serial {
							if called.Load() != 0 {
								t.Errorf("fn ran %d times before the serialization failure, want 0", called.Load())
							}
							// Retried, the transaction sees the committed row.
							want = c.outcome.retry
							checkOutcome(t, waiter(), want, fences.table+"/"+resource, c.token)
						}
						if want == ok {
							if called.Load() != 1 || seen.Load() != lv.level {
								t.Errorf("fn ran %d times at %v, want once at %s", called.Load(), seen.Load(), lv.level)
							}
						} else if called.Load() != 0 {
							t.Errorf("fn ran %d times, want 0", called.Load())
						}
						wantMark, wantVals := int64(5), []string{}
						if c.commit {
							wantMark, wantVals = c.holder, append(wantVals, "holder")
						}
						if want == ok {
							wantMark, wantVals = max(wantMark, c.token), append(wantVals, "waiter")
						}
						if got := markOf(t, db, fences, resource); got != wantMark {
							t.Errorf("fence row: got %d, want %d", got, wantMark)
						}
						rows, err := db.QueryContext(ctx, "SELECT val FROM "+data+" WHERE id IN ($1, $2) ORDER BY id", holderID, waiterID)
						if err != nil {
							t.Fatal(err)
						}
						var got []string
						for rows.Next() {
							var v string
							if err := rows.Scan(&v); err != nil {
								t.Fatal(err)
							}
							got = append(got, v)
						}
						rows.Close()
						if !slices.Equal(got, wantVals) {
							t.Errorf("data: got %q, want %q", got, wantVals)
						}
					})
				}
			})
		}
	}
}

// checkOutcome fails t unless err is the outcome want: nil for admitted, a
// StaleTokenError, or a serialization failure (SQLSTATE 40001).
func checkOutcome(t *testing.T, err error, want, resource string, token int64) {
	t.Helper()
	var pgErr *pgconn.PgError
	switch want {
	case "admitted":
		if err != nil {
			t.Errorf("got %v, want it admitted", err)
		}
	case "stale":
		wantStale(t, err, resource, token, 1<<62)
	case "40001":
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" || errors.Is(err, ErrStaleToken) ||
			!strings.HasPrefix(err.Error(), "store: check ") {
			t.Errorf("got %v, want Check's serialization failure (40001)", err)
		}
	default:
		t.Fatalf("unknown outcome %q", want)
	}
}

// TestFences_Tx_serializableCommit: at SERIALIZABLE, transactions fenced on two
// different resources that read both rows and each write one (write skew) are not
// ordered by their fence rows; PostgreSQL fails the second commit with a
// serialization failure, which Tx returns wrapped, with nothing of it written, and
// the retried Tx commits.
func TestFences_Tx_serializableCommit(t *testing.T) {
	db := postgres(t)
	for _, kind := range txKinds()[:2] {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			run := kind.open(t, databaseURL(t, "default_transaction_isolation", "serializable"))
			fences, _ := testFences(t, db)
			data := testTable(t, db, false)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES (1, ''), (2, '')"); err != nil {
				t.Fatal(err)
			}
			// The steps, in order: the first reads, the second reads, the first writes,
			// the second writes, the first commits, the second commits. Each waits for its
			// turn, or for the other transaction to have returned (a failure).
			read1, read2, wrote1, wrote2 := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			firstDone, secondDone := make(chan struct{}), make(chan struct{})
			await := func(step, other <-chan struct{}) {
				select {
				case <-step:
				case <-other:
				}
			}
			readBoth := func(tx DB) error {
				var n int
				return scanRow(ctx, tx, "SELECT count(*) FROM "+data+" WHERE val = ''", nil, &n)
			}
			write := func(tx DB, id int) error {
				_, err := tx.ExecContext(ctx, "UPDATE "+data+" SET val = 'written' WHERE id = $1", id)
				return err
			}
			first := make(chan error, 1)
			go func() {
				defer close(firstDone)
				first <- run(ctx, fences, "a", 1, func(tx DB) error {
					if err := readBoth(tx); err != nil {
						return err
					}
					close(read1)
					await(read2, secondDone)
					if err := write(tx, 1); err != nil {
						return err
					}
					close(wrote1)
					await(wrote2, secondDone)
					return nil
				})
			}()
			second := run(ctx, fences, "b", 1, func(tx DB) error {
				await(read1, firstDone)
				if err := readBoth(tx); err != nil {
					return err
				}
				close(read2)
				await(wrote1, firstDone)
				if err := write(tx, 2); err != nil {
					return err
				}
				close(wrote2)
				<-firstDone // the first has committed: now this one commits
				return nil
			})
			close(secondDone)
			if err := <-first; err != nil {
				t.Fatalf("first Tx = %v, want nil", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(second, &pgErr) || pgErr.Code != "40001" || !strings.Contains(second.Error(), `tx "`+fences.table+`/b": commit: `) {
				t.Errorf("second Tx: got %v, want its commit's serialization failure (40001), wrapped", second)
			}
			if got := vals(t, db, data); !slices.Equal(got, []string{"written", ""}) {
				t.Errorf("data: got %q, want only the first transaction's write", got)
			}
			if got := markOf(t, db, fences, "b"); got != 0 {
				t.Errorf("fence row b: got %d, want none (rolled back)", got)
			}
			if err := run(ctx, fences, "b", 1, func(tx DB) error { return write(tx, 2) }); err != nil {
				t.Errorf("retried Tx: got %v, want nil", err)
			}
		})
	}
}

// TestFences_PgxTx_savepointRetry: in an outer transaction at REPEATABLE READ whose
// snapshot predates a newer holder's commit, PgxTx (a savepoint) fails with a
// serialization failure, without calling fn, and leaves the outer transaction
// usable; retried in the same outer transaction, it fails again (the snapshot is the
// outer one's); in a new outer transaction, it is admitted.
func TestFences_PgxTx_savepointRetry(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	fences, _ := testFences(t, db)
	conn := openConn(t, databaseURL(t, "default_transaction_isolation", "repeatable read"))
	if err := fences.Check(ctx, db, "r", 5); err != nil {
		t.Fatal(err)
	}
	outer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outer.Rollback(context.Background()) }()
	var one int
	if err := outer.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	if err := fences.Tx(ctx, db, "r", 6, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("newer holder: %v", err)
	}
	called := 0
	fn := func(pgx.Tx) error { called++; return nil }
	for attempt := 1; attempt <= 2; attempt++ {
		checkOutcome(t, fences.PgxTx(ctx, outer, "r", 7, fn), "40001", "", 7)
	}
	if err := outer.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("the outer transaction after the failed savepoints: %v, want it usable", err)
	}
	if err := outer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if called != 0 {
		t.Errorf("fn called %d times, want 0", called)
	}
	outer, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fences.PgxTx(ctx, outer, "r", 7, fn); err != nil || called != 1 {
		t.Errorf("in a new outer transaction: got %v (fn called %d times), want it admitted", err, called)
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := markOf(t, db, fences, "r"); got != 7 {
		t.Errorf("fence row: got %d, want 7", got)
	}
}
