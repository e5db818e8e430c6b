package main

import (
	"errors"
	"fmt"
	"sync"
)

// errStaleToken is the ledger's rejection of a write whose token is older than one it has seen.
var errStaleToken = errors.New("ledger: stale token")

// An entry is one write the ledger was asked to make.
type entry struct {
	account, deposit string
	balance          int
	token            int64
	accepted         bool
}

// ledger is the fenced store: account balances in memory, each guarded by the highest
// fencing token that has written it. A write with a lower token is rejected. (A real store
// does the same check in the same transaction as the write, e.g. UPDATE … WHERE token <= $1.)
type ledger struct {
	mu       sync.Mutex
	unfenced bool // accept every write: shows what goes wrong without the check
	balances map[string]int
	tokens   map[string]int64
	entries  []entry
}

func newLedger(unfenced bool) *ledger {
	return &ledger{unfenced: unfenced, balances: make(map[string]int), tokens: make(map[string]int64)}
}

// Balance returns an account's balance.
func (l *ledger) Balance(account string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[account]
}

// Set writes an account's balance on behalf of a deposit holding token. It returns an error
// wrapping errStaleToken, and changes nothing, when the account has seen a newer token.
func (l *ledger) Set(account, deposit string, balance int, token int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.tokens[account]
	ok := l.unfenced || token >= seen
	l.entries = append(l.entries, entry{account: account, deposit: deposit, balance: balance, token: token, accepted: ok})
	if !ok {
		return fmt.Errorf("%w: %d < %d for %s", errStaleToken, token, seen, account)
	}
	l.balances[account] = balance
	l.tokens[account] = max(seen, token)
	return nil
}

// Token returns the highest token that has written an account.
func (l *ledger) Token(account string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens[account]
}

// Entries returns every write so far, in order.
func (l *ledger) Entries() []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]entry(nil), l.entries...)
}
