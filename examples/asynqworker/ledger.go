package main

import (
	"sync"

	"github.com/fencekit/fencekit/store"
)

// An entry is one write the ledger was asked to make.
type entry struct {
	account, deposit string
	balance          int
	token            int64
	accepted         bool
}

// ledger keeps account balances in memory. Its writes go through a [store.Memory], which
// remembers per account the highest fencing token that has written it and refuses a write
// with a lower one. (A database does the same check in the same statement as the write,
// e.g. UPDATE … WHERE fence_token <= $1: see store.Table.)
type ledger struct {
	guard    store.Memory
	unfenced bool // accept every write: shows what goes wrong without the check

	mu       sync.Mutex
	balances map[string]int
	tokens   map[string]int64 // highest token that wrote, when unfenced
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
// matching [store.ErrStaleToken], and changes nothing, when the account has seen a newer
// token.
func (l *ledger) Set(account, deposit string, balance int, token int64) error {
	write := func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.balances[account] = balance
		l.tokens[account] = max(l.tokens[account], token)
		return nil
	}
	var err error
	if l.unfenced {
		err = write()
	} else {
		err = l.guard.Write(account, token, write)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, entry{account: account, deposit: deposit, balance: balance, token: token, accepted: err == nil})
	return err
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
