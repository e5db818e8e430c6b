package gormfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/store"
)

// store.Fences.Tx on SQLite and MariaDB (and PostgreSQL, whose own tests of Tx, PgxTx
// and the isolation levels are in package store).

// rebind writes the ? placeholders of query as $1, $2, … for PostgreSQL.
func rebind(b backend, query string) string {
	if b.name != "postgres" {
		return query
	}
	var out strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			out.WriteString("$" + strconv.Itoa(n))
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}

// dataTable creates a table (id INT PRIMARY KEY, val BIGINT) of the test's own on db,
// dropped when it ends.
func dataTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := fmt.Sprintf("fk_gf_data_%d_%x", os.Getpid(), rand.Uint32())
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE "+name+" (id INT PRIMARY KEY, val BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

// dataRows returns the table's rows as id:val, by id.
func dataRows(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT id, val FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, val int64
		if err := rows.Scan(&id, &val); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%d", id, val))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// fenceMark returns resource's fence row token, 0 when it has none.
func fenceMark(t *testing.T, db *sql.DB, fences *store.Fences, resource string) int64 {
	t.Helper()
	mark, err := fences.Mark(t.Context(), db, resource)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("Mark(%s): %v", resource, err)
	}
	return mark
}

// TestFencesTx: what each way out of a fenced transaction commits, returns and leaves
// in the data table and the fence row.
func TestFencesTx(t *testing.T) {
	errFn := errors.New("fn failed")
	type boom struct{ s string }
	panicValue := &boom{"fn panicked"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		mark       int64 // the fence row's token before; 0: no row yet
		token      int64
		ctx        context.Context
		fnErr      error // what fn returns after its write
		panics     bool  // fn panics after its write
		wantCalled bool
		wantMark   int64
		wantRows   []string
	}{
		{name: "fresh token commits", mark: 3, token: 5, wantCalled: true, wantMark: 5, wantRows: []string{"1:5"}},
		{name: "first use creates the fence row", token: 1, wantCalled: true, wantMark: 1, wantRows: []string{"1:1"}},
		{name: "equal token commits", mark: 5, token: 5, wantCalled: true, wantMark: 5, wantRows: []string{"1:5"}},
		{name: "stale token: refused, fn not called", mark: 9, token: 5, wantMark: 9},
		{name: "fn error: rolled back, returned as it is", mark: 3, token: 5, fnErr: errFn, wantCalled: true, wantMark: 3},
		{name: "fn panics: rolled back, the panic goes on", mark: 3, token: 5, panics: true, wantCalled: true, wantMark: 3},
		{name: "ctx done before begin: nothing runs", mark: 3, token: 5, ctx: cancelled, wantMark: 3},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.sqlDB(t, false)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := tt.ctx
				if ctx == nil {
					ctx = t.Context()
				}
				fences, name := fenceTable(t, db)
				data := dataTable(t, db)
				if tt.mark > 0 {
					if err := fences.Check(t.Context(), db, "r", tt.mark); err != nil {
						t.Fatal(err)
					}
				}
				called := false
				var err error
				var recovered any
				func() {
					defer func() { recovered = recover() }()
					err = fences.Tx(ctx, db, "r", tt.token, func(tx *sql.Tx) error {
						called = true
						if _, err := tx.ExecContext(ctx, rebind(b, "INSERT INTO "+data+" (id, val) VALUES (1, ?)"), tt.token); err != nil {
							return err
						}
						if tt.panics {
							panic(panicValue)
						}
						return tt.fnErr
					})
				}()
				switch {
				case tt.panics:
					if recovered != panicValue {
						t.Errorf("recovered %v, want fn's panic value", recovered)
					}
				case recovered != nil:
					t.Errorf("recovered %v, want no panic", recovered)
				case tt.fnErr != nil:
					if err != tt.fnErr { // the very error, not wrapped
						t.Errorf("got %v, want fn's error itself", err)
					}
				case tt.ctx != nil:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("got %v, want an error matching context.Canceled", err)
					}
				case tt.mark > tt.token:
					var stale *store.StaleTokenError
					if !errors.As(err, &stale) || stale.Resource != name+"/r" || stale.Token != tt.token || stale.Mark != tt.mark {
						t.Errorf("got %v, want a StaleTokenError for %s/r, token %d, mark %d", err, name, tt.token, tt.mark)
					}
				case err != nil:
					t.Errorf("got %v, want nil", err)
				}
				if called != tt.wantCalled {
					t.Errorf("fn called: got %v, want %v", called, tt.wantCalled)
				}
				if got := fenceMark(t, db, fences, "r"); got != tt.wantMark {
					t.Errorf("fence row: got %d, want %d", got, tt.wantMark)
				}
				if got := dataRows(t, db, data); !slices.Equal(got, tt.wantRows) {
					t.Errorf("data: got %q, want %q", got, tt.wantRows)
				}
				if n := db.Stats().InUse; n != 0 {
					t.Errorf("connections in use: got %d, want 0", n)
				}
			})
		}
	})
}

// TestFencesTx_badInput: what Check rejects, a nil db or fn, and on MariaDB a
// resource longer than the key, are refused with store.ErrInvalid before anything
// runs.
func TestFencesTx_badInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.sqlDB(t, false)
		fences, name := fenceTable(t, db)
		ctx := t.Context()
		called := false
		fn := func(*sql.Tx) error { called = true; return nil }
		var nilFences *store.Fences
		tests := []struct {
			name     string
			fences   *store.Fences
			db       *sql.DB
			resource string
			token    int64
			fn       func(*sql.Tx) error
		}{
			{"zero token", fences, db, "r", 0, fn},
			{"empty resource", fences, db, "", 1, fn},
			{"nil db", fences, nil, "r", 1, fn},
			{"nil fn", fences, db, "r", 1, nil},
			{"nil *Fences", nilFences, db, "r", 1, fn},
			{"zero Fences", &store.Fences{}, db, "r", 1, fn},
		}
		if b.name == "mariadb" {
			tests = append(tests, struct {
				name     string
				fences   *store.Fences
				db       *sql.DB
				resource string
				token    int64
				fn       func(*sql.Tx) error
			}{"resource longer than the key", fences, db, strings.Repeat("r", 3073), 1, fn})
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				called = false
				if err := tt.fences.Tx(ctx, tt.db, tt.resource, tt.token, tt.fn); !errors.Is(err, store.ErrInvalid) {
					t.Errorf("got %v, want an error matching store.ErrInvalid", err)
				}
				if called {
					t.Error("fn was called")
				}
				var n int
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+name).Scan(&n); err != nil || n != 0 {
					t.Errorf("fence rows: got %d, %v; want 0", n, err)
				}
			})
		}
	})
}

// TestFencesTx_concurrent: holders with tokens 1..n, each token twice, roughly in
// token order but shuffled, run fenced transactions that increment a counter and record their token
// under the counter's new value: the recorded tokens, in that order (the commit
// order), never go down (0 stale writes), the counter equals the number of
// transactions Tx reported committed (no lost update), and fn ran exactly for those.
func TestFencesTx_concurrent(t *testing.T) {
	const n, inFlight = 40, 8
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.sqlDB(t, false)
		ctx := t.Context()
		fences, name := fenceTable(t, db)
		counter, history := name+"_counter", name+"_history"
		for _, q := range []string{
			"CREATE TABLE " + counter + " (id INT PRIMARY KEY, n BIGINT NOT NULL)",
			"CREATE TABLE " + history + " (seq BIGINT PRIMARY KEY, token BIGINT NOT NULL)",
			"INSERT INTO " + counter + " (id, n) VALUES (1, 0)",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE "+counter)
			_, _ = db.ExecContext(context.Background(), "DROP TABLE "+history)
		})
		// The fence row exists before the race: two first-ever checks racing on InnoDB can
		// deadlock on the insert.
		if err := fences.Check(ctx, db, "counter", 1); err != nil {
			t.Fatal(err)
		}
		// Roughly in token order, shuffled within a window of 8 tokens, so that stale
		// and fresh tokens interleave.
		type keyed struct{ token, key int64 }
		ks := make([]keyed, 0, 2*n)
		for tok := int64(1); tok <= n; tok++ {
			ks = append(ks, keyed{tok, tok + rand.Int64N(8)}, keyed{tok, tok + rand.Int64N(8)})
		}
		slices.SortStableFunc(ks, func(a, b keyed) int { return int(a.key - b.key) })
		tokens := make([]int64, len(ks))
		for i, k := range ks {
			tokens[i] = k.token
		}
		errs := make([]error, len(tokens))
		var calls atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, inFlight)
		for i, tok := range tokens {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				errs[i] = fences.Tx(ctx, db, "counter", tok, func(tx *sql.Tx) error {
					calls.Add(1)
					if _, err := tx.ExecContext(ctx, "UPDATE "+counter+" SET n = n + 1 WHERE id = 1"); err != nil {
						return err
					}
					var seq int64
					if err := tx.QueryRowContext(ctx, "SELECT n FROM "+counter+" WHERE id = 1").Scan(&seq); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, rebind(b, "INSERT INTO "+history+" (seq, token) VALUES (?, ?)"), seq, tok)
					return err
				})
			})
		}
		wg.Wait()
		committed := 0
		for i, err := range errs {
			var stale *store.StaleTokenError
			switch {
			case err == nil:
				committed++
			case !errors.As(err, &stale) || stale.Mark <= tokens[i]:
				t.Errorf("token %d: got %v, want nil or a StaleTokenError", tokens[i], err)
			}
		}
		rows, err := db.QueryContext(ctx, "SELECT token FROM "+history+" ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		var order []int64
		for rows.Next() {
			var tok int64
			if err := rows.Scan(&tok); err != nil {
				t.Fatal(err)
			}
			order = append(order, tok)
		}
		rows.Close()
		if !slices.IsSorted(order) {
			t.Errorf("stale writes accepted: tokens in commit order %v, want non-decreasing", order)
		}
		var count int64
		if err := db.QueryRowContext(ctx, "SELECT n FROM "+counter+" WHERE id = 1").Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count != int64(committed) || len(order) != committed || calls.Load() != int64(committed) {
			t.Errorf("counter %d, %d recorded, fn ran %d times; want %d each (every committed transaction, and only those)",
				count, len(order), calls.Load(), committed)
		}
		if m := fenceMark(t, db, fences, "counter"); m != n {
			t.Errorf("final mark: got %d, want %d", m, n)
		}
		t.Logf("%d transactions: %d committed, %d refused", len(tokens), committed, len(tokens)-committed)
	})
}

// TestFencesTx_waits: on MariaDB at its default REPEATABLE READ, a Tx whose Check
// waits on the fence row for a holder's transaction goes on when the holder commits:
// admitted with a newer token, its fn then reading what the holder wrote; refused as
// stale with an older one. No serialization failure, unlike PostgreSQL at REPEATABLE
// READ (TestFences_Tx_isolation in package store). When the holder rolls back, the
// waiter goes on against the row as it was.
func TestFencesTx_waits(t *testing.T) {
	db := mariaSQL(t, false)
	ctx := t.Context()
	var level string
	if err := db.QueryRowContext(ctx, "SELECT @@tx_isolation").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "REPEATABLE-READ" {
		t.Fatalf("MariaDB's isolation: got %s, want REPEATABLE-READ (its default)", level)
	}
	data := dataTable(t, db)
	errRollback := errors.New("the holder rolls back")
	cases := []struct {
		name          string
		holder, token int64
		rollback      bool // the holder rolls back instead of committing
		wantStale     bool
	}{
		{"newer token: admitted after the holder", 6, 7, false, false},
		{"older token: refused after the holder", 9, 8, false, true},
		{"older token, the holder rolls back: admitted", 9, 8, true, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A fence table of its own: the wait is seen by its name.
			fences, name := fenceTable(t, db)
			resource := fmt.Sprintf("r%d", i)
			holderID, waiterID := 2*i+1, 2*i+2
			if err := fences.Check(ctx, db, resource, 5); err != nil {
				t.Fatal(err)
			}
			checked, release := make(chan struct{}), make(chan struct{})
			holderDone := make(chan error, 1)
			go func() {
				holderDone <- fences.Tx(ctx, db, resource, c.holder, func(tx *sql.Tx) error {
					close(checked)
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES (?, ?)", holderID, c.holder); err != nil {
						return err
					}
					if c.rollback {
						return errRollback
					}
					return nil
				})
			}()
			select {
			case <-checked:
			case err := <-holderDone:
				t.Fatalf("holder Tx(%d) = %v before its fn", c.holder, err)
			}
			var seen atomic.Int64
			waiterDone := make(chan error, 1)
			go func() {
				waiterDone <- fences.Tx(ctx, db, resource, c.token, func(tx *sql.Tx) error {
					var v int64
					err := tx.QueryRowContext(ctx, "SELECT val FROM "+data+" WHERE id = ?", holderID).Scan(&v)
					if err != nil && !errors.Is(err, sql.ErrNoRows) {
						return err
					}
					seen.Store(v) // 0 when the holder's row is not there
					_, err = tx.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES (?, ?)", waiterID, c.token)
					return err
				})
			}()
			waitLockWaitOn(t, db, name, waiterDone)
			close(release)
			if err := <-holderDone; (err != nil && !c.rollback) || (c.rollback && err != errRollback) {
				t.Fatalf("holder Tx(%d) = %v", c.holder, err)
			}
			err := <-waiterDone
			var want []string
			var wantSeen int64
			if !c.rollback {
				want, wantSeen = append(want, fmt.Sprintf("%d:%d", holderID, c.holder)), c.holder
			}
			if c.wantStale {
				var stale *store.StaleTokenError
				if !errors.As(err, &stale) || stale.Mark != c.holder {
					t.Errorf("waiter Tx(%d): got %v, want a StaleTokenError with mark %d", c.token, err, c.holder)
				}
			} else {
				if err != nil || seen.Load() != wantSeen {
					t.Errorf("waiter Tx(%d): got %v, its fn read %d; want nil, and %d (the holder's write, if committed)", c.token, err, seen.Load(), wantSeen)
				}
				want = append(want, fmt.Sprintf("%d:%d", waiterID, c.token))
			}
			var got []string
			for _, r := range dataRows(t, db, data) {
				if strings.HasPrefix(r, strconv.Itoa(holderID)+":") || strings.HasPrefix(r, strconv.Itoa(waiterID)+":") {
					got = append(got, r)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("data: got %q, want %q", got, want)
			}
		})
	}
}

// innodbTrxRefresh is how often the tests poll information_schema.innodb_trx: InnoDB
// refreshes the table only when it has not been read for 0.1 s (trx0i_s.cc,
// CACHE_MIN_IDLE_TIME_US), so faster polls would keep reading one stale snapshot.
const innodbTrxRefresh = 150 * time.Millisecond

// waitLockWaitOn waits until an InnoDB transaction waits for a lock in a statement on
// table, or fails t after 10 seconds or when done, the waiter's result, comes first.
func waitLockWaitOn(t *testing.T, db *sql.DB, table string, done <-chan error) {
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
			"SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND LOCATE(?, trx_query) > 0", table).Scan(&n)
		if err != nil {
			t.Fatalf("innodb_trx: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transaction waits for a lock on %s after 10s", table)
		}
		time.Sleep(innodbTrxRefresh) // polls for an event in the server
	}
}
