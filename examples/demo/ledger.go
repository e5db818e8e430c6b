package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/store"
)

// ledger holds the demo's account balances. write stores a new balance that its caller
// computed from an earlier read, the read-modify-write that a lock is supposed to protect.
type ledger interface {
	read(ctx context.Context, id string) (int64, error)
	// write stores balance for id. A fenced ledger rejects a token below the highest it
	// has accepted for id with an error matching store.ErrStaleToken; an unfenced one
	// writes whatever it is given.
	write(ctx context.Context, id string, balance, token int64) error
	// writeTwo stores the balances of two accounts at once, each with its own token: a
	// fenced ledger writes both or, when either token is stale, neither (one SQL
	// transaction), so that a transfer never moves money half-way.
	writeTwo(ctx context.Context, a two, b two) error
	reset(ctx context.Context, ids []string) error
}

// two is one account's part of writeTwo.
type two struct {
	id             string
	balance, token int64
}

// memLedger keeps balances in memory; its fenced form checks tokens with store.Memory.
type memLedger struct {
	fenced bool
	mu     sync.Mutex
	guard  store.Memory
	bal    map[string]int64
}

func newMemLedger(fenced bool) *memLedger { return &memLedger{fenced: fenced, bal: map[string]int64{}} }

func (m *memLedger) read(_ context.Context, id string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bal[id], nil
}

func (m *memLedger) write(_ context.Context, id string, balance, token int64) error {
	set := func() error {
		m.mu.Lock()
		m.bal[id] = balance
		m.mu.Unlock()
		return nil
	}
	if !m.fenced {
		return set()
	}
	return m.guard.Write(id, token, set)
}

func (m *memLedger) writeTwo(_ context.Context, a, b two) error {
	set := func() error {
		m.mu.Lock()
		m.bal[a.id], m.bal[b.id] = a.balance, b.balance
		m.mu.Unlock()
		return nil
	}
	if !m.fenced {
		return set()
	}
	if b.id < a.id { // store.Memory locks each record while it checks: one order for all
		a, b = b, a
	}
	// The inner write runs inside the outer one's check: both marks move, or neither.
	return m.guard.Write(a.id, a.token, func() error { return m.guard.Write(b.id, b.token, set) })
}

func (m *memLedger) reset(_ context.Context, ids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.guard = store.Memory{}
	m.bal = map[string]int64{}
	for _, id := range ids {
		m.bal[id] = 0
	}
	return nil
}

// sqlLedger keeps balances in PostgreSQL; its fenced form uses store.Table's conditional
// UPDATE (… WHERE id = $2 AND fence_token <= $3).
type sqlLedger struct {
	fenced bool
	db     *sql.DB
	table  *store.Table
	name   string
}

func newSQLLedger(db *sql.DB, name string, fenced bool) (*sqlLedger, error) {
	t, err := store.NewTable(name)
	if err != nil {
		return nil, err
	}
	return &sqlLedger{fenced: fenced, db: db, table: t, name: name}, nil
}

func (s *sqlLedger) read(ctx context.Context, id string) (int64, error) {
	var b int64
	err := s.db.QueryRowContext(ctx, "SELECT balance FROM "+s.name+" WHERE id = $1", id).Scan(&b)
	return b, err
}

func (s *sqlLedger) write(ctx context.Context, id string, balance, token int64) error {
	if s.fenced {
		return s.table.Update(ctx, s.db, id, token, "balance = $1", balance)
	}
	res, err := s.db.ExecContext(ctx, "UPDATE "+s.name+" SET balance = $1 WHERE id = $2", balance, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("account %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (s *sqlLedger) writeTwo(ctx context.Context, a, b two) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	for _, w := range []two{a, b} {
		if s.fenced {
			err = s.table.Update(ctx, tx, w.id, w.token, "balance = $1", w.balance)
		} else {
			_, err = tx.ExecContext(ctx, "UPDATE "+s.name+" SET balance = $1 WHERE id = $2", w.balance, w.id)
		}
		if err != nil {
			return err // rolled back: a stale token on either row writes neither
		}
	}
	return tx.Commit()
}

func (s *sqlLedger) reset(ctx context.Context, ids []string) error {
	stmts := []string{
		"DROP TABLE IF EXISTS " + s.name,
		"CREATE TABLE " + s.name + " (id TEXT PRIMARY KEY, balance BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)",
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if _, err := s.db.ExecContext(ctx, "INSERT INTO "+s.name+" (id, balance) VALUES ($1, 0)", id); err != nil {
			return err
		}
	}
	return nil
}

// counted wraps a ledger and counts what happens to writes. A write is stale when its token
// is below the highest token already written for the account, whether or not the ledger
// checks: the count is the demo's ground truth.
type counted struct {
	ledger
	mu       sync.Mutex
	top      map[string]int64
	accepted int64 // writes that went through
	stale    int64 // stale writes that went through
	rejected int64 // writes refused with ErrStaleToken
}

// writeTwo counts each of the two rows as write does.
func (c *counted) writeTwo(ctx context.Context, a, b two) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.ledger.writeTwo(ctx, a, b)
	switch {
	case errors.Is(err, store.ErrStaleToken):
		c.rejected += 2
	case err != nil:
	default:
		for _, w := range []two{a, b} {
			c.accepted++
			if w.token < c.top[w.id] {
				c.stale++
			}
			c.top[w.id] = max(c.top[w.id], w.token)
		}
	}
	return err
}

func (c *counted) write(ctx context.Context, id string, balance, token int64) error {
	c.mu.Lock()
	defer c.mu.Unlock() // one writer at a time, so the counts match the order of writes
	err := c.ledger.write(ctx, id, balance, token)
	switch {
	case errors.Is(err, store.ErrStaleToken):
		c.rejected++
	case err != nil:
	default:
		c.accepted++
		if token < c.top[id] {
			c.stale++
		}
		c.top[id] = max(c.top[id], token)
	}
	return err
}
