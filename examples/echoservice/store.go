package main

import (
	"errors"
	"sync"
	"sync/atomic"

	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

// ledger keeps account balances in memory. Every write goes through a [store.Memory],
// which remembers per account the highest fencing token that wrote it (its high-water mark)
// and refuses writes with a lower one. The lock keeps writers apart; this check is what
// makes a late write from a holder whose lease lapsed harmless.
type ledger struct {
	guard    store.Memory
	mu       sync.Mutex
	balances map[string]int64
	refused  atomic.Int64
}

func newLedger() *ledger { return &ledger{balances: map[string]int64{}} }

// balance returns an account's balance, 0 for a new account.
func (l *ledger) balance(id string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[id]
}

// set writes an account's balance if token is at least the account's mark, and raises the
// mark to token. Otherwise it writes nothing and returns an error matching
// [store.ErrStaleToken].
func (l *ledger) set(id string, token, balance int64) error {
	// The record is named as its lock is: fencemw.ResourceName gives the middleware's name.
	err := l.guard.Write(fencemw.ResourceName("account", id), token, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.balances[id] = balance
		return nil
	})
	if errors.Is(err, store.ErrStaleToken) {
		l.refused.Add(1)
	}
	return err
}

// refusedWrites returns how many writes were refused as stale.
func (l *ledger) refusedWrites() int { return int(l.refused.Load()) }
