package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

const (
	envDatabaseURL     = "FENCING_DATABASE_URL"
	envRequirePostgres = "FENCING_REQUIRE_POSTGRES"
)

// postgres returns a database handle for t on the PostgreSQL named by FENCING_DATABASE_URL.
// It skips t when the variable is unset or the server does not answer, unless
// FENCING_REQUIRE_POSTGRES=1, when it fails t instead. No test reaches a PostgreSQL that
// the variable does not name.
func postgres(t *testing.T) *sql.DB {
	t.Helper()
	require := os.Getenv(envRequirePostgres) == "1"
	dsn := os.Getenv(envDatabaseURL)
	if dsn == "" {
		if require {
			t.Fatalf("%s=1 but %s is not set", envRequirePostgres, envDatabaseURL)
		}
		t.Skipf("skipping: set %s to run the SQL tests against PostgreSQL", envDatabaseURL)
	}
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		where := "the URL in " + envDatabaseURL
		if u, perr := url.Parse(dsn); perr == nil && u.Host != "" {
			where = u.Redacted()
		}
		msg := fmt.Sprintf("PostgreSQL not reachable at %s: %v", where, err)
		if require {
			t.Fatalf("%s; %s=1 requires it", msg, envRequirePostgres)
		}
		t.Skipf("skipping: %s; set %s=1 to fail instead", msg, envRequirePostgres)
	}
	db.SetMaxOpenConns(inFlight)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mustTable returns NewTable(name, opts...), failing the test on an error.
func mustTable(t *testing.T, name string, opts ...Option) *Table {
	t.Helper()
	table, err := NewTable(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// testTable creates a table named uniquely for this run (process id and a random
// suffix) and drops it when the test ends. Its columns: an id, a value, the history
// of tokens that wrote (appended by the tests' SET lists) and, if withFence, the
// fence_token column as documented.
func testTable(t *testing.T, db *sql.DB, withFence bool) string {
	t.Helper()
	name := fmt.Sprintf("fk_store_%d_%x", os.Getpid(), rand.Uint64())
	ddl := "CREATE TABLE " + name + " (id BIGINT PRIMARY KEY, val TEXT NOT NULL DEFAULT '', history BIGINT[] NOT NULL DEFAULT '{}'"
	if withFence {
		ddl += ", fence_token BIGINT NOT NULL DEFAULT 0"
	}
	if _, err := db.ExecContext(t.Context(), ddl+")"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop table %s: %v", name, err)
		}
	})
	return name
}

// row reads one test row.
func row(t *testing.T, db *sql.DB, table string, id int64) (val string, mark int64, history []int64) {
	t.Helper()
	var hist string
	err := db.QueryRowContext(t.Context(), "SELECT val, fence_token, history::text FROM "+table+" WHERE id = $1", id).Scan(&val, &mark, &hist)
	if err != nil {
		t.Fatalf("read row %d: %v", id, err)
	}
	hist = strings.Trim(hist, "{}")
	if hist != "" {
		for _, f := range strings.Split(hist, ",") {
			var v int64
			if _, err := fmt.Sscan(f, &v); err != nil {
				t.Fatalf("history %q: %v", hist, err)
			}
			history = append(history, v)
		}
	}
	return val, mark, history
}

const setVal = "val = $1, history = array_append(history, $2)"

func TestTable_Update_sequence(t *testing.T) {
	db := postgres(t)
	type step struct {
		token     int64
		wantStale bool
		wantMark  int64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"default mark admits any token", []step{{1, false, 1}}},
		{"higher token", []step{{3, false, 3}, {4, false, 4}}},
		{"equal token writes again", []step{{3, false, 3}, {3, false, 3}}},
		{"lower token refused", []step{{5, false, 5}, {4, true, 5}, {5, false, 5}}},
		{"above 2^53", []step{{1<<53 + 1, false, 1<<53 + 1}, {1 << 53, true, 1<<53 + 1}}},
		{"int64 max", []step{{math.MaxInt64, false, math.MaxInt64}, {math.MaxInt64, false, math.MaxInt64}, {math.MaxInt64 - 1, true, math.MaxInt64}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := testTable(t, db, true)
			table := mustTable(t, name)
			ctx := t.Context()
			if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id) VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			resource := name + "/1"
			for i, s := range tt.steps {
				value := fmt.Sprintf("v%d", i)
				err := table.Update(ctx, db, int64(1), s.token, setVal, value, s.token)
				if s.wantStale {
					wantStale(t, err, resource, s.token, s.wantMark)
				} else if err != nil {
					t.Errorf("step %d: Update(%d) = %v, want nil", i, s.token, err)
				}
				got, mark, _ := row(t, db, name, 1)
				if mark != s.wantMark {
					t.Errorf("step %d: mark = %d, want %d", i, mark, s.wantMark)
				}
				if s.wantStale == (got == value) {
					t.Errorf("step %d: value = %q after token %d (stale %v)", i, got, s.token, s.wantStale)
				}
				if m, err := table.Mark(ctx, db, int64(1)); err != nil || m != s.wantMark {
					t.Errorf("step %d: Mark = %d, %v; want %d", i, m, err, s.wantMark)
				}
			}
		})
	}
}

func TestTable_Update_missingRow(t *testing.T) {
	db := postgres(t)
	name := testTable(t, db, true)
	table := mustTable(t, name)
	err := table.Update(t.Context(), db, int64(42), 5, setVal, "v", int64(5))
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrStaleToken) {
		t.Errorf("Update of a missing row = %v, want ErrNotFound and not ErrStaleToken", err)
	}
	if _, err := table.Mark(t.Context(), db, int64(42)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mark of a missing row = %v, want ErrNotFound", err)
	}
}

// TestTable_schema follows the documented migration: an existing table gains the
// column with ALTER TABLE, and its rows start at mark 0.
func TestTable_schema(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, false)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id, val) VALUES (1, 'old')"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+name+" ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	table := mustTable(t, name)
	if m, err := table.Mark(ctx, db, int64(1)); err != nil || m != 0 {
		t.Errorf("Mark after migration = %d, %v; want 0", m, err)
	}
	if err := table.Update(ctx, db, int64(1), 1, "val = $1", "new"); err != nil {
		t.Errorf("Update(1) = %v, want nil", err)
	}
	// An empty SET list only raises the mark.
	if err := table.Update(ctx, db, int64(1), 2, ""); err != nil {
		t.Errorf("Update(2, no SET list) = %v, want nil", err)
	}
	if val, mark, _ := row(t, db, name, 1); val != "new" || mark != 2 {
		t.Errorf("row = %q, %d; want \"new\", 2", val, mark)
	}
}

func TestTable_options(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	name := fmt.Sprintf("fk_store_opts_%d_%x", os.Getpid(), rand.Uint64())
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+name+` (key TEXT PRIMARY KEY, body TEXT, "Fence" BIGINT NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name) })
	table := mustTable(t, name, WithIDColumn("key"), WithTokenColumn(`"Fence"`), nil)
	if err := table.Upsert(ctx, db, "a", 3, []string{"body"}, "x"); err != nil {
		t.Fatalf("Upsert = %v", err)
	}
	if err := table.Update(ctx, db, "a", 4, "body = $1", "y"); err != nil {
		t.Errorf("Update(4) = %v, want nil", err)
	}
	wantStale(t, table.Update(ctx, db, "a", 3, "body = $1", "z"), name+"/a", 3, 4)
	if m, err := table.Mark(ctx, db, "a"); err != nil || m != 4 {
		t.Errorf("Mark = %d, %v; want 4", m, err)
	}
}

func TestTable_Upsert(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, true)
	table := mustTable(t, name)
	steps := []markStep{
		{5, false, 5}, // inserts
		{5, false, 5}, // the same holder writes again
		{4, true, 5},
		{1<<53 + 1, false, 1<<53 + 1},
		{1 << 53, true, 1<<53 + 1},
		{math.MaxInt64, false, math.MaxInt64},
	}
	for i, s := range steps {
		value := fmt.Sprintf("v%d", i)
		err := table.Upsert(ctx, db, int64(7), s.token, []string{"val"}, value)
		if s.wantStale {
			wantStale(t, err, name+"/7", s.token, s.wantMark)
		} else if err != nil {
			t.Errorf("step %d: Upsert(%d) = %v, want nil", i, s.token, err)
		}
		got, mark, _ := row(t, db, name, 7)
		if mark != s.wantMark || s.wantStale == (got == value) {
			t.Errorf("step %d: row = %q, %d after token %d; want mark %d (stale %v)", i, got, mark, s.token, s.wantMark, s.wantStale)
		}
	}
	// No columns: only the mark.
	if err := table.Upsert(ctx, db, int64(8), 2, nil); err != nil {
		t.Errorf("Upsert without columns = %v, want nil", err)
	}
	if m, err := table.Mark(ctx, db, int64(8)); err != nil || m != 2 {
		t.Errorf("Mark = %d, %v; want 2", m, err)
	}
}

func TestTable_transaction(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, true)
	table := mustTable(t, name)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id, fence_token) VALUES (1, 5)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	wantStale(t, table.Update(ctx, tx, int64(1), 4, "val = $1", "stale"), name+"/1", 4, 5)
	if err := table.Update(ctx, tx, int64(1), 6, "val = $1", "fresh"); err != nil {
		t.Fatalf("Update in tx = %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if val, mark, _ := row(t, db, name, 1); val != "fresh" || mark != 6 {
		t.Errorf("row = %q, %d; want \"fresh\", 6", val, mark)
	}
}

func TestTable_badInput(t *testing.T) {
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, true)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	table := mustTable(t, name)
	mysql := mustTable(t, name, WithQuestionMarks())
	var nilTable *Table
	tests := []struct {
		name   string
		table  *Table
		db     DB
		id     any
		token  int64
		cols   []string
		values []any
	}{
		{"zero token", table, db, int64(1), 0, []string{"val"}, []any{"x"}},
		{"negative token", table, db, int64(1), -1, []string{"val"}, []any{"x"}},
		{"nil db", table, nil, int64(1), 9, []string{"val"}, []any{"x"}},
		{"typed nil *sql.DB", table, (*sql.DB)(nil), int64(1), 9, []string{"val"}, []any{"x"}},
		{"typed nil *sql.Tx", table, (*sql.Tx)(nil), int64(1), 9, []string{"val"}, []any{"x"}},
		{"nil id", table, db, nil, 9, []string{"val"}, []any{"x"}},
		{"nil *Table", nilTable, db, int64(1), 9, []string{"val"}, []any{"x"}},
		{"zero Table", &Table{}, db, int64(1), 9, []string{"val"}, []any{"x"}},
		{"upsert count mismatch", table, db, int64(1), 9, []string{"val"}, nil},
		{"upsert empty column", table, db, int64(1), 9, []string{""}, []any{"x"}},
		{"upsert with question marks", mysql, db, int64(1), 9, []string{"val"}, []any{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.HasPrefix(tt.name, "upsert") {
				if err := tt.table.Update(ctx, tt.db, tt.id, tt.token, "val = $1", "x"); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotFound) {
					t.Errorf("Update: got %v, want an error matching ErrInvalid", err)
				}
			}
			if err := tt.table.Upsert(ctx, tt.db, tt.id, tt.token, tt.cols, tt.values...); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotFound) {
				t.Errorf("Upsert: got %v, want an error matching ErrInvalid", err)
			}
			if val, mark, _ := row(t, db, name, 1); val != "" || mark != 0 {
				t.Errorf("row = %q, %d; want it untouched", val, mark)
			}
		})
	}
}

func TestNewTable(t *testing.T) {
	tests := []struct {
		name    string
		table   string
		opts    []Option
		wantErr bool
	}{
		{"defaults", "accounts", nil, false},
		{"empty name", "", nil, true},
		{"blank name", "  ", nil, true},
		{"empty id column", "accounts", []Option{WithIDColumn("")}, true},
		{"empty token column", "accounts", []Option{WithTokenColumn("")}, true},
		{"nil option", "accounts", []Option{nil}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := NewTable(tt.table, tt.opts...)
			if (err != nil) != tt.wantErr || (err == nil) == (table == nil) {
				t.Errorf("NewTable = %v, %v; want error %v", table, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("NewTable: got %v, want an error matching ErrInvalid", err)
			}
		})
	}
}

// TestTable_Update_query pins the statements, including MySQL's, which has no test
// database here.
func TestTable_Update_query(t *testing.T) {
	tests := []struct {
		name   string
		opts   []Option
		set    string
		args   []any
		want   string
		wantDB []any
	}{
		{
			"postgres", nil, "a = $1, b = $2", []any{"x", "y"},
			"UPDATE t SET a = $1, b = $2, fence_token = $3 WHERE id = $4 AND fence_token <= $5",
			[]any{"x", "y", int64(7), 1, int64(7)},
		},
		{
			"postgres without SET list", nil, "", nil,
			"UPDATE t SET fence_token = $1 WHERE id = $2 AND fence_token <= $3",
			[]any{int64(7), 1, int64(7)},
		},
		{
			"mysql", []Option{WithQuestionMarks(), WithIDColumn("`key`"), WithTokenColumn("fence")}, "a = ?", []any{"x"},
			"UPDATE t SET a = ?, fence = ? WHERE `key` = ? AND fence <= ?",
			[]any{"x", int64(7), 1, int64(7)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := NewTable("t", tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recordingDB{}
			_ = table.Update(t.Context(), rec, 1, 7, tt.set, tt.args...)
			if len(rec.queries) == 0 || rec.queries[0] != tt.want {
				t.Errorf("query: got %q, want %q", rec.queries, tt.want)
			}
			if got, want := fmt.Sprint(rec.args), fmt.Sprint(tt.wantDB); got != want {
				t.Errorf("args: got %s, want %s", got, want)
			}
		})
	}
}

func TestTable_Upsert_query(t *testing.T) {
	table, err := NewTable("t")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingDB{}
	_ = table.Upsert(t.Context(), rec, 1, 7, []string{"a", "b"}, "x", "y")
	const want = "INSERT INTO t AS cur (id, fence_token, a, b) VALUES ($1, $2, $3, $4)" +
		" ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b, fence_token = EXCLUDED.fence_token" +
		" WHERE cur.fence_token <= EXCLUDED.fence_token"
	if len(rec.queries) == 0 || rec.queries[0] != want {
		t.Errorf("query: got %q, want %q", rec.queries, want)
	}
}

// recordingDB records the statements a Table sends and fails them all.
type recordingDB struct {
	queries []string
	args    []any
}

var errRecorded = errors.New("recorded")

func (r *recordingDB) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	r.queries, r.args = append(r.queries, query), args
	return nil, errRecorded
}

func (r *recordingDB) QueryRowContext(context.Context, string, ...any) *sql.Row {
	panic("recordingDB: QueryRowContext not expected")
}

func TestTable_Update_concurrent(t *testing.T) {
	const n = 150
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, true)
	table := mustTable(t, name)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+name+" (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	ws := schedule(t, n)
	errs := runAll(ws, func(w writer) error {
		return table.Update(ctx, db, int64(1), w.token, setVal, fmt.Sprintf("%d/%d", w.token, w.id), w.token)
	})

	accepted := 0
	for i, w := range ws {
		if errs[i] == nil {
			accepted++
			continue
		}
		wantStale(t, errs[i], name+"/1", w.token, n)
	}
	val, mark, history := row(t, db, name, 1)
	staleAccepted := 0
	for i := 1; i < len(history); i++ {
		if history[i] < history[i-1] {
			staleAccepted++
		}
	}
	if staleAccepted != 0 {
		t.Errorf("stale writes accepted: got %d, want 0 (history %v)", staleAccepted, history)
	}
	if len(history) != accepted {
		t.Errorf("writes applied: got %d, want %d (every accepted write)", len(history), accepted)
	}
	var tok, id int
	if _, err := fmt.Sscanf(val, "%d/%d", &tok, &id); err != nil || tok != n || mark != n {
		t.Errorf("final row = %q, mark %d; want one written with token %d", val, mark, n)
	}
	t.Logf("%d writers: %d accepted, %d refused", len(ws), accepted, len(ws)-accepted)
}

func TestTable_Upsert_concurrent(t *testing.T) {
	const n = 150
	db := postgres(t)
	ctx := t.Context()
	name := testTable(t, db, true)
	table := mustTable(t, name)
	// The row does not exist yet: the first writers race to insert it.
	ws := schedule(t, n)
	errs := runAll(ws, func(w writer) error {
		return table.Upsert(ctx, db, int64(1), w.token, []string{"val"}, fmt.Sprintf("%d/%d", w.token, w.id))
	})
	accepted := 0
	for i, w := range ws {
		if errs[i] == nil {
			accepted++
			continue
		}
		wantStale(t, errs[i], name+"/1", w.token, n)
	}
	val, mark, _ := row(t, db, name, 1)
	var tok, id int
	if _, err := fmt.Sscanf(val, "%d/%d", &tok, &id); err != nil || tok != n || mark != n {
		t.Errorf("final row = %q, mark %d; want one written with token %d", val, mark, n)
	}
	t.Logf("%d writers: %d accepted, %d refused", len(ws), accepted, len(ws)-accepted)
}
