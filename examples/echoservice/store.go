package main

import (
	"fmt"
	"sync"
)

// ledger is a tiny in-memory store of account balances that checks fencing tokens: each
// account remembers the highest token that wrote it (its high-water mark) and refuses
// writes with a lower one. The lock keeps writers apart; this check is what makes a late
// write from a holder whose lease lapsed harmless.
type ledger struct {
	mu       sync.Mutex
	accounts map[string]*account
	refused  int
}

type account struct {
	balance int64
	mark    int64
}

// errStale is returned for a write whose token is below the account's mark.
type errStale struct{ token, mark int64 }

func (e *errStale) Error() string {
	return fmt.Sprintf("stale fencing token %d: the account was written with %d", e.token, e.mark)
}

func newLedger() *ledger { return &ledger{accounts: map[string]*account{}} }

// balance returns an account's balance, 0 for a new account.
func (l *ledger) balance(id string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.accounts[id]; a != nil {
		return a.balance
	}
	return 0
}

// set writes an account's balance if token is at least the account's mark, and raises the
// mark to token. It returns *errStale and writes nothing otherwise.
func (l *ledger) set(id string, token, balance int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accounts[id]
	if a == nil {
		a = &account{}
		l.accounts[id] = a
	}
	if token < 1 || token < a.mark {
		l.refused++
		return &errStale{token: token, mark: a.mark}
	}
	a.balance, a.mark = balance, token
	return nil
}

// refusedWrites returns how many writes were refused as stale.
func (l *ledger) refusedWrites() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}
