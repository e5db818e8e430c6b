package gormfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
	"github.com/fencekit/fencekit/store/gormfence"
	"gorm.io/gorm"
)

// store.Fences's tests on MariaDB and SQLite live here, beside their drivers, which
// the root module does not require; its PostgreSQL tests are in package store.

// fenceTable creates a fence table of the test's own on db, dropped when it ends.
func fenceTable(t *testing.T, db *sql.DB) (*store.Fences, string) {
	t.Helper()
	name := fmt.Sprintf("fk_gf_fences_%d_%x", os.Getpid(), rand.Uint32())
	fences := store.NewFences(name)
	if err := fences.CreateTable(t.Context(), db); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return fences, name
}

// TestFences_sequence checks tokens in order through *sql.DB and *sql.Tx (whose
// dialect Fences asks the database for), on MySQL with and without clientFoundRows.
func TestFences_sequence(t *testing.T) {
	steps := []struct {
		token     int64
		wantStale bool
		wantMark  int64
	}{
		{5, false, 5}, {5, false, 5}, {4, true, 5}, {6, false, 6}, {1 << 62, false, 1 << 62}, {1<<62 - 1, true, 1 << 62},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, found := range []bool{false, true} {
			for _, inTx := range []bool{false, true} {
				t.Run(fmt.Sprintf("clientFoundRows=%v/tx=%v", found, inTx), func(t *testing.T) {
					db := b.sqlDB(t, found)
					fences, name := fenceTable(t, db)
					ctx := t.Context()
					for i, s := range steps {
						var conn store.DB = db
						var tx *sql.Tx
						if inTx {
							var err error
							if tx, err = db.BeginTx(ctx, nil); err != nil {
								t.Fatal(err)
							}
							conn = tx
						}
						err := fences.Check(ctx, conn, "r", s.token)
						if s.wantStale {
							var stale *store.StaleTokenError
							if !errors.As(err, &stale) || stale.Mark != s.wantMark || stale.Resource != name+"/r" {
								t.Errorf("step %d: Check(%d) = %v, want stale with mark %d", i, s.token, err, s.wantMark)
							}
						} else if err != nil {
							t.Errorf("step %d: Check(%d) = %v, want nil", i, s.token, err)
						}
						if tx != nil {
							if err := tx.Commit(); err != nil {
								t.Fatal(err)
							}
						}
						if m, err := fences.Mark(ctx, db, "r"); err != nil || m != s.wantMark {
							t.Errorf("step %d: Mark = %d, %v; want %d", i, m, err, s.wantMark)
						}
					}
				})
			}
		}
	})
}

// TestFences_stalled: on MariaDB, a newer holder's Check waits for the transaction of
// a holder stalled after its Check, and sees its write; everywhere, a holder stalled
// before its Check is refused once a newer one has committed.
func TestFences_stalled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.sqlDB(t, false)
		fences, name := fenceTable(t, db)
		ctx := t.Context()
		data := name + "_data"
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+data+" (id INT PRIMARY KEY, val BIGINT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+data) })
		if _, err := db.ExecContext(ctx, "INSERT INTO "+data+" (id, val) VALUES (1, 0)"); err != nil {
			t.Fatal(err)
		}
		begin := func() *sql.Tx {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		}
		write := func(tx *sql.Tx, token int64) {
			t.Helper()
			if _, err := tx.ExecContext(ctx, "UPDATE "+data+" SET val = ? WHERE id = 1", token); err != nil {
				t.Fatal(err)
			}
		}
		if b.name == "postgres" {
			t.Skip("PostgreSQL: TestFences_stalledTransaction in package store")
		}
		if b.name == "mariadb" {
			old := begin()
			if err := fences.Check(ctx, old, "acct", 5); err != nil {
				t.Fatal(err)
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var id int64
			if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			newer, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			checked := make(chan error, 1)
			go func() { checked <- fences.Check(ctx, newer, "acct", 6) }()
			waitLockWait(t, db, id)
			write(old, 5)
			if err := old.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-checked; err != nil {
				t.Fatalf("newer Check(6) = %v, want nil", err)
			}
			var seen int64
			if err := newer.QueryRowContext(ctx, "SELECT val FROM "+data+" WHERE id = 1").Scan(&seen); err != nil || seen != 5 {
				t.Errorf("newer transaction reads %d, %v; want 5, the stalled write", seen, err)
			}
			write(newer, 6)
			if err := newer.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		old := begin() // token 7 stalls before its check
		newer := begin()
		if err := fences.Check(ctx, newer, "acct", 8); err != nil {
			t.Fatal(err)
		}
		write(newer, 8)
		if err := newer.Commit(); err != nil {
			t.Fatal(err)
		}
		var stale *store.StaleTokenError
		if err := fences.Check(ctx, old, "acct", 7); !errors.As(err, &stale) || stale.Mark != 8 {
			t.Errorf("stalled Check(7) = %v, want stale with mark 8", err)
		}
		_ = old.Rollback()
		var val int64
		if err := db.QueryRowContext(ctx, "SELECT val FROM "+data+" WHERE id = 1").Scan(&val); err != nil || val != 8 {
			t.Errorf("val = %d, %v; want 8", val, err)
		}
	})
}

// waitLockWait waits until the MariaDB connection id waits for a row lock.
func waitLockWait(t *testing.T, db *sql.DB, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(t.Context(),
			"SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", id).Scan(&n)
		if err != nil {
			t.Fatalf("innodb_trx: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d: not waiting for a lock after 10s", id)
		}
		time.Sleep(innodbTrxRefresh) // polls for an event in the server
	}
}

// Account names its resource, for DoAll.
type Account struct {
	ID         int64 `gorm:"primaryKey;autoIncrement:false"`
	Balance    int64
	FenceToken int64 `gorm:"not null;default:0"`
}

func (a *Account) FenceResource() string { return fmt.Sprintf("account:%d", a.ID) }

func TestDoAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Account{}, &Order{})
		locker := fencing.New(redistest.New(t).Client)
		t.Cleanup(func() { _ = locker.Close() })
		resources := []string{"account:1", "account:2"}
		// The set's tokens create both accounts; each row gets its own resource's token.
		var first context.Context
		err := locker.DoAll(t.Context(), resources, func(ctx context.Context) error {
			first = context.WithoutCancel(ctx)
			return db.WithContext(ctx).Create(&[]Account{{ID: 1, Balance: 10}, {ID: 2, Balance: 10}}).Error
		})
		if err != nil {
			t.Fatalf("DoAll create: %v", err)
		}
		// A transfer under the next set.
		err = locker.DoAll(t.Context(), resources, func(ctx context.Context) error {
			if _, ok := fencing.TokenFromContext(ctx); ok {
				t.Error("TokenFromContext inside a DoAll of two: got a token")
			}
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				if err := tx.Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance - 3")).Error; err != nil {
					return err
				}
				return tx.Model(&Account{ID: 2}).Update("balance", gorm.Expr("balance + 3")).Error
			})
		})
		if err != nil {
			t.Fatalf("DoAll transfer: %v", err)
		}
		var accts []Account
		db.Order("id").Find(&accts)
		if len(accts) != 2 || accts[0].Balance != 7 || accts[1].Balance != 13 || accts[0].FenceToken != 2 || accts[1].FenceToken != 2 {
			t.Errorf("accounts: got %+v, want 7 and 13, each with its resource's second token", accts)
		}
		// The first set's holder comes back late: refused, nothing written.
		err = db.WithContext(first).Model(&Account{ID: 1}).Update("balance", 0).Error
		wantStale(t, err, 1, 2)
		// A model without FenceResource has no token inside a DoAll of two.
		err = locker.DoAll(t.Context(), resources, func(ctx context.Context) error {
			return db.WithContext(ctx).Create(&Order{ID: 1}).Error
		})
		if !errors.Is(err, gormfence.ErrNoToken) {
			t.Errorf("Order inside DoAll: got %v, want ErrNoToken", err)
		}
		// An account outside the held set has no token either.
		err = locker.Do(t.Context(), "account:1", func(ctx context.Context) error {
			return db.WithContext(ctx).Model(&Account{ID: 2}).Update("balance", 0).Error
		})
		if !errors.Is(err, gormfence.ErrNoToken) {
			t.Errorf("account 2 under the lock of account 1: got %v, want ErrNoToken", err)
		}
	})
}

func TestCheck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Note{})
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		fences, _ := fenceTable(t, sqlDB)
		run := func(token int64, text string) error {
			return db.WithContext(tok(t, token)).Transaction(func(tx *gorm.DB) error {
				if err := gormfence.Check(tx, fences, "note:1"); err != nil {
					return err
				}
				return tx.Save(&Note{ID: 1, Text: text}).Error // an unfenced model, fenced by the row
			})
		}
		if err := run(5, "five"); err != nil {
			t.Fatalf("token 5: %v", err)
		}
		wantStale(t, run(4, "four"), 4, 5)
		var n Note
		if err := db.Take(&n, 1).Error; err != nil || n.Text != "five" {
			t.Errorf("note: got %+v, %v; want five", n, err)
		}
		if err := gormfence.Check(db.WithContext(tok(t, 6)), fences, "note:1"); err == nil {
			t.Error("Check outside a transaction: got nil, want an error")
		}
		err = db.WithContext(t.Context()).Transaction(func(tx *gorm.DB) error { return gormfence.Check(tx, fences, "note:1") })
		if !errors.Is(err, gormfence.ErrNoToken) {
			t.Errorf("Check without a token: got %v, want ErrNoToken", err)
		}
		if err := gormfence.Check(nil, fences, "note:1"); err == nil {
			t.Error("Check(nil): got nil, want an error")
		}
	})
}

// Counter is the workload's row; History records each accepted write in commit order.
type Counter struct {
	ID         int64 `gorm:"primaryKey;autoIncrement:false"`
	Value      int64
	FenceToken int64 `gorm:"not null;default:0"`
}

type History struct {
	ID    int64 `gorm:"primaryKey"`
	Token int64
}

// TestWorkload runs holders that take the lock, read the counter and write it back
// plus one through GORM, in a transaction fenced by a fence row (gormfence.Check)
// and by the plugin. A third of them pause past their lease, before their transaction
// or after its check and read: they expire their own lease and wait until a newer
// token is out. Every write accepted
// must carry a token no lower than the writes accepted before it (0 stale writes
// accepted), and the counter must equal the number of accepted writes (no update
// lost to a stale read).
func TestWorkload(t *testing.T) {
	const holders, rounds = 6, 8
	forEachBackend(t, func(t *testing.T, b backend) {
		db := newDB(t, b, nil, &Counter{}, &History{})
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		fences, _ := fenceTable(t, sqlDB)
		r := redistest.New(t)
		locker := fencing.New(r.Client)
		t.Cleanup(func() { _ = locker.Close() })
		ctx := t.Context()
		mustCreate(t, db, 1, &Counter{ID: 1})
		if err := fences.Check(ctx, sqlDB, "counter", 1); err != nil { // the fence row exists before the race
			t.Fatal(err)
		}

		var (
			mu     sync.Mutex
			issued int64
			newer  = make(chan struct{}) // closed when a token above issued's old value is out
		)
		announce := func(tok int64) {
			mu.Lock()
			defer mu.Unlock()
			if tok > issued {
				issued = tok
				close(newer)
				newer = make(chan struct{})
			}
		}
		waitNewer := func(tok int64) {
			for {
				mu.Lock()
				ch, done := newer, issued > tok
				mu.Unlock()
				if done {
					return
				}
				select {
				case <-ch:
				case <-time.After(2 * time.Second): // nobody else is left to take the lock
					return
				}
			}
		}
		var accepted, refused, paused sync.Map
		var wg sync.WaitGroup
		for h := range holders {
			wg.Go(func() {
				for i := range rounds {
					lock := acquire(t, locker)
					tok := lock.Token()
					announce(tok)
					// A third pause: before their transaction, or after its check and read.
					pause := (h+i)%3 == 0
					stall := func() {
						paused.Store(tok, true)
						r.Mini.FastForward(2 * time.Second) // this holder's lease lapses
						waitNewer(tok)
					}
					if pause && i%2 == 0 {
						stall()
					}
					err := db.WithContext(fencing.ContextWithToken(ctx, tok)).Transaction(func(tx *gorm.DB) error {
						if err := gormfence.Check(tx, fences, "counter"); err != nil {
							return err
						}
						var c Counter
						if err := tx.Take(&c, 1).Error; err != nil {
							return err
						}
						if pause && i%2 == 1 {
							stall()
						}
						if err := tx.Model(&c).Update("value", c.Value+1).Error; err != nil {
							return err
						}
						return tx.Create(&History{Token: tok}).Error
					})
					switch {
					case err == nil:
						accepted.Store(tok, true)
					case errors.Is(err, store.ErrStaleToken):
						refused.Store(tok, true)
					default:
						t.Errorf("holder %d, token %d: %v", h, tok, err)
					}
					_ = lock.Release(context.Background())
				}
			})
		}
		wg.Wait()
		var hist []History
		if err := db.Order("id").Find(&hist).Error; err != nil {
			t.Fatal(err)
		}
		tokens := make([]int64, len(hist))
		for i, h := range hist {
			tokens[i] = h.Token
		}
		stale := 0
		for i := 1; i < len(tokens); i++ {
			if tokens[i] < tokens[i-1] {
				stale++
			}
		}
		if stale != 0 || !slices.IsSorted(tokens) {
			t.Errorf("stale writes accepted: got %d, want 0 (tokens in commit order %v)", stale, tokens)
		}
		var c Counter
		if err := db.Take(&c, 1).Error; err != nil || c.Value != int64(len(hist)) {
			t.Errorf("counter: got %d, %v; want %d, one per accepted write", c.Value, err, len(hist))
		}
		count := func(m *sync.Map) (n int) {
			m.Range(func(any, any) bool { n++; return true })
			return n
		}
		t.Logf("%d writes: %d accepted, %d refused; %d holders paused past their lease",
			holders*rounds, count(&accepted), count(&refused), count(&paused))
	})
}

// acquire takes the workload's lock, retrying while it is busy (a lapsed lease frees
// it at once on miniredis, whose clock the paused holders move).
func acquire(t *testing.T, locker *fencing.Locker) *fencing.Lock {
	for {
		lock, err := locker.TryAcquire(t.Context(), "counter", fencing.WithTTL(time.Second))
		if err == nil {
			return lock
		}
		if !errors.Is(err, fencing.ErrNotAcquired) || t.Context().Err() != nil {
			t.Errorf("TryAcquire: %v", err)
			return nil
		}
		time.Sleep(time.Millisecond) // the holder is busy: try again
	}
}
