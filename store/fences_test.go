package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// testFences creates a fence table named uniquely for this run with CreateTable and
// drops it when the test ends.
func testFences(t *testing.T, db *sql.DB) (*Fences, string) {
	t.Helper()
	name := fmt.Sprintf("fk_fences_%d_%x", os.Getpid(), rand.Uint64())
	fences := NewFences(name)
	if err := fences.CreateTable(t.Context(), db); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	// A second call leaves the table as it is.
	if err := fences.CreateTable(t.Context(), db); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop table %s: %v", name, err)
		}
	})
	return fences, name
}

// pgxConn and pgxPool connect to the PostgreSQL of FENCING_DATABASE_URL with pgx
// itself; call postgres(t) first, which skips or fails t when there is none.
func pgxConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), os.Getenv(envDatabaseURL))
	if err != nil {
		t.Fatalf("pgx.Connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func pgxPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), os.Getenv(envDatabaseURL))
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// conns returns every kind of DB the tests run Fences and Table on: each runs fn with
// a DB and a function that ends the DB's transaction, if any (commit when ok).
func conns(t *testing.T, db *sql.DB) map[string]func(t *testing.T) (DB, func(ok bool)) {
	t.Helper()
	none := func(bool) {}
	return map[string]func(t *testing.T) (DB, func(ok bool)){
		"*sql.DB": func(*testing.T) (DB, func(bool)) { return db, none },
		"*sql.Conn": func(t *testing.T) (DB, func(bool)) {
			conn, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			return conn, none
		},
		"*sql.Tx": func(t *testing.T) (DB, func(bool)) {
			tx, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx, endSQL(t, tx)
		},
		"*pgx.Conn":     func(t *testing.T) (DB, func(bool)) { return Pgx(pgxConn(t)), none },
		"*pgxpool.Pool": func(t *testing.T) (DB, func(bool)) { return Pgx(pgxPool(t)), none },
		"pgx.Tx": func(t *testing.T) (DB, func(bool)) {
			tx, err := pgxConn(t).Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return Pgx(tx), func(ok bool) {
				t.Helper()
				if !ok {
					_ = tx.Rollback(t.Context())
					return
				}
				if err := tx.Commit(t.Context()); err != nil {
					t.Fatalf("commit: %v", err)
				}
			}
		},
	}
}

// endSQL returns a function that commits tx when ok and rolls it back otherwise.
func endSQL(t *testing.T, tx *sql.Tx) func(ok bool) {
	return func(ok bool) {
		t.Helper()
		if !ok {
			_ = tx.Rollback()
			return
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

func TestFences_Check_sequence(t *testing.T) {
	db := postgres(t)
	steps := []markStep{
		{5, false, 5}, // creates the row
		{5, false, 5}, // the same holder checks again
		{4, true, 5},
		{6, false, 6},
		{1<<53 + 1, false, 1<<53 + 1},
		{1 << 53, true, 1<<53 + 1},
		{math.MaxInt64, false, math.MaxInt64},
		{math.MaxInt64 - 1, true, math.MaxInt64},
	}
	for kind, open := range conns(t, db) {
		t.Run(kind, func(t *testing.T) {
			fences, name := testFences(t, db)
			ctx := t.Context()
			for i, s := range steps {
				// Each step in a transaction of its own when the kind is one.
				conn, end := open(t)
				err := fences.Check(ctx, conn, "order:7", s.token)
				if s.wantStale {
					wantStale(t, err, name+"/order:7", s.token, s.wantMark)
				} else if err != nil {
					t.Fatalf("step %d: Check(%d) = %v, want nil", i, s.token, err)
				}
				end(err == nil)
				if m, err := fences.Mark(ctx, db, "order:7"); err != nil || m != s.wantMark {
					t.Errorf("step %d: Mark = %d, %v; want %d", i, m, err, s.wantMark)
				}
			}
			// Another resource has a row of its own.
			conn, end := open(t)
			if err := fences.Check(ctx, conn, "order:8", 1); err != nil {
				t.Errorf("Check(order:8, 1) = %v, want nil", err)
			}
			end(true)
			if _, err := fences.Mark(ctx, db, "order:9"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Mark of a resource never checked = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestFences_badInput(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	fences, name := testFences(t, db)
	var nilFences *Fences
	tests := []struct {
		name     string
		fences   *Fences
		db       DB
		resource string
		token    int64
	}{
		{"zero token", fences, db, "r", 0},
		{"negative token", fences, db, "r", -1},
		{"empty resource", fences, db, "", 1},
		{"nil db", fences, nil, "r", 1},
		{"typed nil *sql.DB", fences, (*sql.DB)(nil), "r", 1},
		{"typed nil *sql.Tx", fences, (*sql.Tx)(nil), "r", 1},
		{"Pgx(nil)", fences, Pgx(nil), "r", 1},
		{"Pgx(typed nil *pgx.Conn)", fences, Pgx((*pgx.Conn)(nil)), "r", 1},
		{"empty table", NewFences(""), db, "r", 1},
		{"blank table", NewFences(" "), db, "r", 1},
		{"nil *Fences", nilFences, db, "r", 1},
		{"zero Fences", &Fences{}, db, "r", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fences.Check(ctx, tt.db, tt.resource, tt.token)
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) {
				t.Errorf("Check: got %v, want an error matching ErrInvalid", err)
			}
			if tt.token > 0 && tt.resource != "" {
				if err := tt.fences.CreateTable(ctx, tt.db); !errors.Is(err, ErrInvalid) {
					t.Errorf("CreateTable: got %v, want an error matching ErrInvalid", err)
				}
				if _, err := tt.fences.Mark(ctx, tt.db, tt.resource); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) {
					t.Errorf("Mark: got %v, want an error matching ErrInvalid", err)
				}
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil || n != 0 {
				t.Errorf("fence rows: got %d, %v; want 0", n, err)
			}
		})
	}
}

func TestFences_errors(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	missing := NewFences(fmt.Sprintf("fk_fences_missing_%x", rand.Uint64()))
	err := missing.Check(ctx, db, "r", 1)
	if err == nil || !strings.HasPrefix(err.Error(), `store: check "fk_fences_missing_`) || errors.Is(err, ErrStaleToken) {
		t.Errorf("Check on a missing table: got %v, want a database error naming the row", err)
	}
	// A DB that cannot read cannot say why a check changed nothing.
	fences, _ := testFences(t, db)
	if err := fences.Check(ctx, db, "r", 5); err != nil {
		t.Fatal(err)
	}
	err = fences.Check(ctx, execOnly{db}, "r", 4)
	if err == nil || errors.Is(err, ErrStaleToken) || !strings.Contains(err.Error(), "QueryRowContext") {
		t.Errorf("Check(4) through a DB without reads: got %v, want an error about reading", err)
	}
}

// execOnly is a DB with ExecContext and nothing else; it says PostgreSQL.
type execOnly struct{ db *sql.DB }

func (e execOnly) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return e.db.ExecContext(ctx, query, args...)
}

func (e execOnly) Driver() driver.Driver { return e.db.Driver() }

// TestFences_stalledTransaction shows the ordering that makes a fence row fence a whole
// transaction, with a holder whose transaction stalls after its check (its lease lapses
// meanwhile) and a newer holder:
//   - stalled after the check: the newer holder's check waits on the row lock until the
//     stalled transaction ends; the stalled transaction's writes land first, and the
//     newer transaction sees them;
//   - stalled before the check, the newer holder committed first: the stalled check
//     is refused and its transaction writes nothing;
//   - stalled after the check, past idle_in_transaction_session_timeout: PostgreSQL
//     ends the stalled session, its transaction rolls back, and the newer holder goes on.
func TestFences_stalledTransaction(t *testing.T) {
	db := postgres(t)
	for _, pgxTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("pgx=%v", pgxTx), func(t *testing.T) {
			testStalled(t, db, pgxTx)
		})
	}
}

// holder is one lock holder's transaction on a connection of its own.
type holder struct {
	t   *testing.T
	pid int32
	db  DB
	end func(commit bool) error
}

// begin starts a holder's transaction on a connection of its own, with
// database/sql or with pgx.
func begin(t *testing.T, db *sql.DB, usePgx bool) *holder {
	t.Helper()
	ctx := t.Context()
	h := &holder{t: t}
	if usePgx {
		conn := pgxConn(t)
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&h.pid); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		h.db = Pgx(tx)
		h.end = func(commit bool) error {
			if commit {
				return tx.Commit(ctx)
			}
			return tx.Rollback(ctx)
		}
		return h
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&h.pid); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	h.db = tx
	h.end = func(commit bool) error {
		if commit {
			return tx.Commit()
		}
		return tx.Rollback()
	}
	return h
}

// exec runs a statement in the holder's transaction, failing the test on an error.
func (h *holder) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.db.ExecContext(h.t.Context(), query, args...); err != nil {
		h.t.Fatalf("holder %d: %s: %v", h.pid, query, err)
	}
}

// waitBlocked waits until the backend pid waits on a lock (pg_stat_activity's
// wait_event_type is Lock), or fails the test after 10 seconds.
func waitBlocked(t *testing.T, db *sql.DB, pid int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		err := db.QueryRowContext(t.Context(),
			"SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d: not waiting on a lock after 10s", pid)
		}
		// A poll every millisecond: waiting for an event in another process.
		time.Sleep(time.Millisecond)
	}
}

func testStalled(t *testing.T, db *sql.DB, usePgx bool) {
	ctx := t.Context()
	fences, _ := testFences(t, db)
	data := testTable(t, db, false)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+data+" (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	history := func() string {
		t.Helper()
		var h string
		if err := db.QueryRowContext(ctx, "SELECT history::text FROM "+data+" WHERE id = 1").Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	appendToken := "UPDATE " + data + " SET history = array_append(history, $1) WHERE id = 1"

	t.Run("stalled after its check: ordered first", func(t *testing.T) {
		old := begin(t, db, usePgx)
		if err := fences.Check(ctx, old.db, "acct:1", 5); err != nil {
			t.Fatalf("old Check(5) = %v", err)
		}
		// The old holder stalls here; its lease lapses and a newer holder starts.
		newer := begin(t, db, usePgx)
		checked := make(chan error, 1)
		go func() { checked <- fences.Check(ctx, newer.db, "acct:1", 6) }()
		waitBlocked(t, db, newer.pid)
		select {
		case err := <-checked:
			t.Fatalf("newer Check returned %v while the old transaction held the row", err)
		default:
		}
		old.exec(appendToken, int64(5)) // the stalled holder wakes and writes
		if err := old.end(true); err != nil {
			t.Fatalf("old commit: %v", err)
		}
		if err := <-checked; err != nil {
			t.Fatalf("newer Check(6) = %v, want nil after the old transaction ended", err)
		}
		var seen string
		if err := scanRow(ctx, newer.db, "SELECT history::text FROM "+data+" WHERE id = 1", nil, &seen); err != nil {
			t.Fatal(err)
		}
		if seen != "{5}" {
			t.Errorf("newer transaction reads history %s, want {5}: the old write came first", seen)
		}
		newer.exec(appendToken, int64(6))
		if err := newer.end(true); err != nil {
			t.Fatal(err)
		}
		if got := history(); got != "{5,6}" {
			t.Errorf("history: got %s, want {5,6}", got)
		}
	})

	t.Run("stalled before its check: refused", func(t *testing.T) {
		old := begin(t, db, usePgx) // token 7: begins, then stalls
		newer := begin(t, db, usePgx)
		if err := fences.Check(ctx, newer.db, "acct:1", 8); err != nil {
			t.Fatal(err)
		}
		newer.exec(appendToken, int64(8))
		if err := newer.end(true); err != nil {
			t.Fatal(err)
		}
		wantStale(t, fences.Check(ctx, old.db, "acct:1", 7), fences.table+"/acct:1", 7, 8)
		if err := old.end(false); err != nil {
			t.Fatal(err)
		}
		if got := history(); got != "{5,6,8}" {
			t.Errorf("history: got %s, want {5,6,8}", got)
		}
	})

	t.Run("stalled past idle_in_transaction_session_timeout", func(t *testing.T) {
		old := begin(t, db, usePgx)
		old.exec("SET LOCAL idle_in_transaction_session_timeout = '300ms'")
		if err := fences.Check(ctx, old.db, "acct:1", 9); err != nil {
			t.Fatal(err)
		}
		newer := begin(t, db, usePgx)
		start := time.Now()
		// The server ends the stalled session; the newer check then takes the row.
		if err := fences.Check(ctx, newer.db, "acct:1", 10); err != nil {
			t.Fatalf("newer Check(10) = %v", err)
		}
		t.Logf("the newer check waited %v for the stalled session to be ended", time.Since(start).Round(time.Millisecond))
		newer.exec(appendToken, int64(10))
		if err := newer.end(true); err != nil {
			t.Fatal(err)
		}
		// The stalled holder wakes: its session is gone, and nothing it does commits.
		if _, err := old.db.ExecContext(ctx, appendToken, int64(9)); err == nil {
			if err := old.end(true); err == nil {
				t.Fatal("the stalled transaction committed after its session timed out")
			}
		}
		if got := history(); got != "{5,6,8,10}" {
			t.Errorf("history: got %s, want {5,6,8,10}", got)
		}
	})
}

// TestFences_concurrent runs transactions of writers holding tokens 1..n (each token
// twice, shuffled within a window), each a Check then a write of its token into a
// data row, on several connections at once: the data row's history of tokens, in
// commit order, must never go down, and every transaction whose Check passed must
// be in it.
func TestFences_concurrent(t *testing.T) {
	const n = 120
	db := postgres(t)
	ctx := t.Context()
	fences, _ := testFences(t, db)
	data := testTable(t, db, true) // row reads the fence_token column too
	if _, err := db.ExecContext(ctx, "INSERT INTO "+data+" (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	ws := schedule(t, n)
	errs := runAll(ws, func(w writer) error {
		return fencedAppend(ctx, db, fences, data, w.token)
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
	for i := 1; i < len(history); i++ {
		if history[i] < history[i-1] {
			t.Errorf("stale write accepted: token %d after %d (history %v)", history[i], history[i-1], history)
		}
	}
	if len(history) != accepted {
		t.Errorf("writes applied: got %d, want %d (every accepted transaction)", len(history), accepted)
	}
	t.Logf("%d transactions: %d accepted, %d refused", len(ws), accepted, len(ws)-accepted)
}

// fencedAppend is one holder's transaction: the fence row's check, then its write.
func fencedAppend(ctx context.Context, db *sql.DB, fences *Fences, data string, token int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fences.Check(ctx, tx, "acct:1", token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+data+" SET history = array_append(history, $1) WHERE id = 1", token); err != nil {
		return err
	}
	return tx.Commit()
}

// TestTable_pgx runs Table's statements through pgx: the same outcomes as with
// database/sql.
func TestTable_pgx(t *testing.T) {
	db := postgres(t)
	for _, kind := range []string{"*pgx.Conn", "*pgxpool.Pool", "pgx.Tx"} {
		t.Run(kind, func(t *testing.T) {
			ctx := t.Context()
			name := testTable(t, db, true)
			table := mustTable(t, name)
			if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id) VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			conn, end := conns(t, db)[kind](t)
			if err := table.Update(ctx, conn, int64(1), 5, setVal, "five", int64(5)); err != nil {
				t.Fatalf("Update(5) = %v", err)
			}
			wantStale(t, table.Update(ctx, conn, int64(1), 4, setVal, "four", int64(4)), name+"/1", 4, 5)
			if err := table.Update(ctx, conn, int64(42), 6, setVal, "x", int64(6)); !errors.Is(err, ErrNotFound) {
				t.Errorf("Update of a missing row = %v, want ErrNotFound", err)
			}
			if err := table.Upsert(ctx, conn, int64(2), 3, []string{"val"}, "three"); err != nil {
				t.Errorf("Upsert(3) = %v", err)
			}
			wantStale(t, table.Upsert(ctx, conn, int64(2), 2, []string{"val"}, "two"), name+"/2", 2, 3)
			if m, err := table.Mark(ctx, conn, int64(1)); err != nil || m != 5 {
				t.Errorf("Mark = %d, %v; want 5", m, err)
			}
			end(true)
			if val, mark, _ := row(t, db, name, 1); val != "five" || mark != 5 {
				t.Errorf("row 1 = %q, %d; want \"five\", 5", val, mark)
			}
			if val, mark, _ := row(t, db, name, 2); val != "three" || mark != 3 {
				t.Errorf("row 2 = %q, %d; want \"three\", 3", val, mark)
			}
		})
	}
}

func TestDialect(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want dialect
	}{
		{"nil", nil, dialectUnknown},
		{"unknown", struct{}{}, dialectUnknown},
		{"pgx stdlib", stdlib.GetDefaultDriver(), dialectPostgres},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := driverDialect(tt.v); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if got := dialectOf(Pgx(nil)); got != dialectPostgres {
		t.Errorf("dialectOf(Pgx): got %v, want PostgreSQL", got)
	}
}
