package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

// typeDeposit is the task type of a deposit.
const typeDeposit = "deposit"

// A deposit is a task's payload.
type deposit struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Amount  int    `json:"amount"`
	// Stall makes the first attempt stop, holding the lock, until the program resumes it:
	// a stand-in for a long GC pause or a stuck call that ignores its context.
	Stall bool `json:"stall,omitempty"`
}

// accountOf is the asynqfence.ResourceFunc: one lock per account.
// maxAmount bounds a deposit, so no balance can overflow.
const maxAmount = 1_000_000

func accountOf(t *asynq.Task) (string, error) {
	switch t.Type() {
	case typeDeposit:
		var d deposit
		if err := json.Unmarshal(t.Payload(), &d); err != nil {
			return "", err
		}
		// Check the whole payload here, before the lock is taken: a task that can never
		// succeed is archived at once (asynq.SkipRetry) and uses up no token.
		switch {
		case d.Account == "":
			return "", fmt.Errorf("deposit %q names no account", d.ID)
		case d.Amount <= 0 || d.Amount > maxAmount:
			return "", fmt.Errorf("deposit %q: amount %d not in [1, %d]", d.ID, d.Amount, maxAmount)
		}
		return "account:" + d.Account, nil
	}
	return "", nil // other task types need no lock
}

// A stall is a worker that has stopped while holding a lock.
type stall struct {
	ctx   context.Context // the handler's context: cancelled when the lock is lost
	token int64
}

// worker handles deposits: it reads the balance, works a little, and writes the new balance
// with its fencing token.
type worker struct {
	ledger  *ledger
	stalled chan<- stall
	resume  <-chan struct{}

	mu      sync.Mutex
	running map[string]int // deposits running per account
	most    int            // the most deposits seen running at once for one account
}

func newWorker(l *ledger, stalled chan<- stall, resume <-chan struct{}) *worker {
	return &worker{ledger: l, stalled: stalled, resume: resume, running: make(map[string]int)}
}

func (w *worker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var d deposit
	if err := json.Unmarshal(t.Payload(), &d); err != nil {
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	token, _ := fencing.TokenFromContext(ctx)
	w.enter(d.Account)
	defer w.leave(d.Account)

	balance := w.ledger.Balance(d.Account)
	if n, _ := asynq.GetRetryCount(ctx); d.Stall && n == 0 {
		w.stalled <- stall{ctx: ctx, token: token}
		<-w.resume // ignores ctx, as a paused process would
	} else {
		select { // the work
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return w.ledger.Set(d.Account, d.ID, balance+d.Amount, token)
}

func (w *worker) enter(account string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[account]++
	w.most = max(w.most, w.running[account])
}

func (w *worker) leave(account string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[account]--
}

// mostAtOnce returns the most deposits that ran at once for one account, and starts counting
// afresh.
func (w *worker) mostAtOnce() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.most
	w.most = 0
	return m
}
