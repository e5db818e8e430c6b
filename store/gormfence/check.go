package gormfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
	"gorm.io/gorm"
)

// Check runs fences.Check for resource, with the token of the transaction's context,
// on the connection of the GORM transaction tx: call it first in db.Transaction, and
// the whole transaction is fenced, including raw SQL and writes of models without
// the fence column (see [store.Fences.Check] for the ordering it gives):
//
//	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		if err := gormfence.Check(tx, fences, "payout:42"); err != nil {
//			return err // a newer holder has committed: roll back
//		}
//		// reads and writes, all fenced
//	})
//
// The token is fencing.TokenFor(ctx, resource), else fencing.TokenFromContext(ctx).
// If there is none, Check returns an error matching [ErrNoToken] (also with
// [AllowUnfenced], which concerns the plugin's own writes). If tx is nil or not in a
// transaction, or fences is nil, it returns an error matching [store.ErrInvalid] and
// runs nothing. Otherwise it returns what fences.Check returns: a
// [*store.StaleTokenError] when a newer token has committed, an error matching
// store.ErrInvalid for an invalid token, resource or Fences.
func Check(tx *gorm.DB, fences *store.Fences, resource string) error {
	if tx == nil || tx.Statement == nil {
		return invalid("gormfence: check: nil *gorm.DB")
	}
	if fences == nil {
		return invalid("gormfence: check %q: nil *store.Fences", resource)
	}
	if tx.Error != nil {
		return fmt.Errorf("gormfence: check %q: %w", resource, tx.Error)
	}
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		return invalid("gormfence: check %q: not in a transaction: call it inside db.Transaction", resource)
	}
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	token, ok := fencing.TokenFor(ctx, resource)
	if !ok {
		token, ok = fencing.TokenFromContext(ctx)
	}
	if !ok {
		return fmt.Errorf("%w: check %q", ErrNoToken, resource)
	}
	conn := txConn{pool: tx.Statement.ConnPool}
	if sqlDB, err := tx.DB(); err == nil {
		conn.driver = sqlDB.Driver()
	}
	return fences.Check(ctx, conn, resource, token)
}

// txConn is a GORM transaction's connection as a store.DB; it names the driver, so
// that store.Fences writes the SQL of the database without asking it.
type txConn struct {
	pool   gorm.ConnPool
	driver driver.Driver
}

func (c txConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.pool.ExecContext(ctx, query, args...)
}

func (c txConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.pool.QueryRowContext(ctx, query, args...)
}

func (c txConn) Driver() driver.Driver { return c.driver }
